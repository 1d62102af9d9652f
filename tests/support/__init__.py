"""What tests share and nothing else: helpers, recorded logs, the cluster harness. No test file
imports another test file; they import from here."""
