// The bearer token, kept in sessionStorage for this tab only (never a URL or a cookie),
// and the dialog that asks for it.
import { TOKEN_KEY } from "./constants.js";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function askToken(problem = "") {
  const dialog = document.getElementById("token-dialog");
  document.getElementById("token-problem").textContent = problem;
  if (!dialog.open) dialog.showModal();
}

// `then` runs once a token is given (the page the tab is on is drawn again).
export function keepTokens(then) {
  document.getElementById("token-form").addEventListener("submit", () => {
    const input = document.getElementById("token-input");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    then();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    askToken();
  });
}
