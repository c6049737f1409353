"""Programs that check and run the deployment (``make test-integration``), run as
``python scripts/NAME.py``; a package only so that mypy names them ``scripts.NAME``. Nothing
imports them; they import the project's public modules (docs/architecture.md, rules)."""
