"""`attribution serve`: the HTTP face of the project (FastAPI, which Prefect already ships).
The routers and what they share are in app.py; the schemas senders post in payloads.py."""
