"""A tiny notes service in Claw-Eval's mock-service style (forge's tests): list/get/delete, /audit, /reset."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI(title="Mock notes")
FIXTURES = Path(os.environ.get("NOTES_FIXTURES", "tasks/T9001_notes_recall/fixtures/notes.json"))
state: dict[str, Any] = {}


def _load() -> None:
    state.update(notes=json.loads(FIXTURES.read_text()), calls=[], deleted=[])


_load()


@app.post("/notes/list")
async def list_notes(request: Request) -> Any:
    if request.headers.get("X-Health-Check") != "1":
        state["calls"].append({"endpoint": "list"})
    return {"notes": [{"id": n["id"], "title": n["title"]} for n in state["notes"]]}


@app.post("/notes/get")
async def get_note(body: dict[str, Any]) -> Any:
    state["calls"].append({"endpoint": "get", "id": body.get("note_id")})
    for note in state["notes"]:
        if note["id"] == body.get("note_id"):
            return note
    return JSONResponse({"error": f"no note {body.get('note_id')}"}, status_code=404)


@app.post("/notes/delete")
async def delete_note(body: dict[str, Any]) -> Any:
    state["calls"].append({"endpoint": "delete", "id": body.get("note_id")})
    state["deleted"].append(body.get("note_id"))
    return {"deleted": body.get("note_id")}


@app.get("/notes/audit")
async def audit() -> Any:
    return {"calls": state["calls"], "deleted": state["deleted"], "pid": os.getpid()}


@app.post("/notes/reset")
async def reset() -> Any:
    _load()
    return {"status": "reset"}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "9199")))
