"""The runtime: what real workers execute (the Ray engine and the HTTP front end build on
it)."""
