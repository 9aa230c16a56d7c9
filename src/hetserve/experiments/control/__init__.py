"""``reproduce control``: the control loop over a day of moving load (issue 40)."""
