"""The control loop's pure parts: the controller, the reconciler and the switching
scheduler (``docs/control.md``); ``engine.control`` runs them on a clock."""
