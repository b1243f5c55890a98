"""forge's own look into a rollout's page over the Chrome DevTools Protocol: evaluate a JavaScript expression in
the first tab and return its JSON value. Used for what the agent must not do itself (start a MiniWoB++ episode,
read the page's reward after the harness ended); the agent's browser tools go through ``@playwright/mcp``.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import websocket

from forge_cli.browser.chromium import BrowserError

TIMEOUT_S = 30.0


def _page_ws_url(cdp_url: str) -> str:
    try:
        targets = httpx.get(f"{cdp_url}/json/list", timeout=TIMEOUT_S).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise BrowserError(f"the browser's DevTools endpoint does not answer ({exc})") from None
    pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
    if not pages:
        raise BrowserError("the browser has no open page")
    return str(pages[0]["webSocketDebuggerUrl"])


def command_sync(cdp_url: str, method: str, params: dict[str, Any], timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """The result of one CDP command sent to the browser's first page."""
    try:
        ws = websocket.create_connection(_page_ws_url(cdp_url), timeout=timeout, suppress_origin=True)
    except (OSError, websocket.WebSocketException) as exc:
        raise BrowserError(f"cannot open the page's DevTools socket ({exc})") from None
    try:
        ws.send(json.dumps({"id": 1, "method": method, "params": params}))
        while True:
            message = json.loads(ws.recv())
            if message.get("id") == 1:
                break
    except (OSError, ValueError, websocket.WebSocketException) as exc:
        raise BrowserError(f"the page did not answer {method} ({exc})") from None
    finally:
        ws.close()
    if "error" in message:
        raise BrowserError(f"{method} refused: {message['error']}")
    result: dict[str, Any] = message.get("result", {})
    return result


def screenshot_sync(cdp_url: str) -> bytes:
    """The page's viewport as PNG."""
    return base64.b64decode(command_sync(cdp_url, "Page.captureScreenshot", {"format": "png"})["data"])


def evaluate_sync(cdp_url: str, expression: str, timeout: float = TIMEOUT_S) -> Any:
    """The JSON value of ``expression`` (awaited when it is a promise) in the browser's first page."""
    result = command_sync(cdp_url, "Runtime.evaluate",
                          {"expression": expression, "returnByValue": True, "awaitPromise": True}, timeout)
    if "exceptionDetails" in result:
        details = result["exceptionDetails"]
        text = details.get("exception", {}).get("description") or details.get("text", "")
        raise BrowserError(f"the page's script failed: {text[:500]}")
    return result.get("result", {}).get("value")


async def screenshot(cdp_url: str) -> bytes:
    return await asyncio.to_thread(screenshot_sync, cdp_url)


async def evaluate(cdp_url: str, expression: str, timeout: float = TIMEOUT_S) -> Any:
    return await asyncio.to_thread(evaluate_sync, cdp_url, expression, timeout)
