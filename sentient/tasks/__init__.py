"""Tasks: a plan and a schedule; each run is a file under tasks/<id>/runs/."""
