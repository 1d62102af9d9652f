"""The promotions projection: which version each environment's slot runs, and the promotions that
put it there."""
