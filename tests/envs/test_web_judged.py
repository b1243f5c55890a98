"""``env=webvoyager`` and ``env=mind2web`` offline: forge's own small sites (a shop, a docs page, a form) served on
loopback, tasks in each benchmark's file format whose live hosts ``env.options.url_map`` rewrites to them, a scripted
harness that browses with the real browser tools, and a scripted judge server (OpenAI-compatible) that answers each
protocol's stages. Checks the verdicts, the judge's saved inputs, and "not judged" when the judge is down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.envs.source import load_tasks
from forge_cli.envs.web import judge as protocol
from forge_cli.envs.web import map_url
from forge_cli.errors import UserError
from tests.eval.test_eval_cli import _eval
from tests.helpers import QuietHandler, serve_http
from tests.requires import requires
from tests.rollout.test_rollout_run import NO_UPSTREAM, _harness_dir

pytestmark = pytest.mark.mitm

SITES: dict[str, dict[str, str]] = {
    "shop": {"/": '<h1>Widget shop</h1><a href="/blue.html">Blue widget</a> <a href="/red.html">Red widget</a>',
             "/blue.html": "<h1>Blue widget</h1><p>Price: 42 euros</p>",
             "/red.html": "<h1>Red widget</h1><p>Price: 17 euros</p>"},
    "docs": {"/": '<h1>Server docs</h1><a href="/config.html">Configuration</a>',
             "/config.html": "<h1>Configuration</h1><p>The server listens on port 8123.</p>"},
    "form": {"/": '<h1>Newsletter</h1><form action="/done.html"><input name="email" aria-label="Email">'
                  '<button type="submit">Subscribe</button></form>',
             "/done.html": "<h1>Subscribed</h1>"},
}
WEBVOYAGER = [{"web_name": "Shop", "id": "Shop--0", "ques": "How much does the blue widget cost?",
               "web": "https://shop.example.com/"},
              {"web_name": "Docs", "id": "Docs--0", "ques": "Which port does the server listen on?",
               "web": "https://docs.example.com/"}]
MIND2WEB = [{"task_id": "5b1e0c7a", "confirmed_task": "Find the price of the blue widget.",
             "website": "https://shop.example.com/", "reference_length": 2, "level": "easy"},
            {"task_id": "9f3d2a11", "confirmed_task": "Subscribe to the newsletter with a@b.c.",
             "website": "https://form.example.com/", "reference_length": 3, "level": "medium"}]
# browses with the REST face of the browser tools: opens the first link, answers with the price it finds
HARNESS = r'''import json, re, sys, urllib.request
if sys.argv[1:] == ["--version"]:
    sys.exit(print("browse 1.0"))
instruction, url, key = sys.argv[1:4]
def call(tool, **args):
    request = urllib.request.Request(f"{url}/tools/{tool}", data=json.dumps(args).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(request, timeout=90))["result"]
page = call("browser_snapshot")
link = re.search(r'link "([^"]+)" \[ref=(e\d+)\]', page)
if link:
    page = call("browser_click", target=link.group(2), element=link.group(1))
price = re.search(r"Price: (\d+)", page)
print(f"The answer is {price.group(1)} euros." if price else "I could not find it.")
'''


def _site(pages: dict[str, str]) -> type[QuietHandler]:
    class Site(QuietHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path.split("?")[0])
            data = f"<html><body>{body}</body></html>".encode() if body is not None else b"not found"
            self.reply(200 if body is not None else 404, data, "text/html")

    return Site


@dataclass
class Judge:
    """A scripted judge: each protocol's stage recognised by its system prompt; success when the answer says 42."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, messages: list[dict[str, Any]]) -> str:
        system = messages[0]["content"]
        user = messages[1]["content"]
        text = user if isinstance(user, str) else " ".join(p.get("text", "") for p in user if p["type"] == "text")
        images = 0 if isinstance(user, str) else sum(1 for p in user if p["type"] == "image_url")
        self.requests.append({"system": system[:40], "images": images, "text": text})
        if system == protocol.WEBVOYAGER_SYSTEM:
            return "The screenshots show it.\n" + ("SUCCESS" if "RESULT RESPONSE: The answer is 42" in text
                                                   else "NOT SUCCESS")
        if system == protocol.KEY_POINTS_SYSTEM:
            return "Key Points:\n1. the blue widget\n2. its price"
        if system == protocol.IMAGE_SYSTEM:
            return "Reasoning: the page shows a price.\nScore: 4"
        return "Status: success" if "Final answer: The answer is 42" in text else "Status: failure"


@pytest.fixture
def judge() -> Iterator[Judge]:
    state = Judge("")

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer = {"role": "assistant", "content": state.answer(body["messages"])}
            self.reply(200, json.dumps({"choices": [{"message": answer}]}).encode())

    server, url = serve_http(Handler)
    state.url = f"{url}/v1"
    yield state
    server.shutdown()


@pytest.fixture
def sites() -> Iterator[dict[str, str]]:
    servers = {name: serve_http(_site(pages)) for name, pages in SITES.items()}
    yield {f"{name}.example.com": url for name, (_, url) in servers.items()}
    for server, _ in servers.values():
        server.shutdown()


def _files(tmp_path: Path) -> dict[str, Path]:
    webvoyager = tmp_path / "WebVoyager_data.jsonl"
    webvoyager.write_text("".join(json.dumps(t) + "\n" for t in WEBVOYAGER))
    mind2web = tmp_path / "Online_Mind2Web.json"
    mind2web.write_text(json.dumps(MIND2WEB))
    return {"webvoyager": webvoyager, "mind2web": mind2web}


def _url_map(sites: dict[str, str]) -> str:
    return "env.options.url_map={" + ",".join(f"{host}:'{url}'" for host, url in sites.items()) + "}"


def test_task_files_and_url_map(tmp_path: Path) -> None:
    files = _files(tmp_path)
    env = compose(["env=webvoyager", f"env.path={files['webvoyager']}",
                   "env.options.url_map={shop.example.com:'http://127.0.0.1:9/copy'}"]).experiment.env
    shop, docs = load_tasks(env, purpose="eval").tasks
    assert shop.id == "Shop--0" and shop.category == "Shop" and shop.tool_state["browser"]["screenshots"] is True
    assert shop.tool_state["browser"]["url"] == "http://127.0.0.1:9/copy/" and shop.metadata["task_url"] == \
        "https://shop.example.com/"
    assert docs.tool_state["browser"]["url"] == "https://docs.example.com/"  # not mapped: the live site
    assert "How much does the blue widget cost?" in shop.instruction and shop.verify and "webvoyager" in shop.verify
    env = compose(["env=mind2web", f"env.path={files['mind2web']}"]).experiment.env
    assert [(t.id, t.category) for t in load_tasks(env, purpose="eval").tasks] == [("5b1e0c7a", "easy"),
                                                                                    ("9f3d2a11", "medium")]
    assert map_url("https://a.com/x?q=1#f", {"https://a.com": "http://h:1/base/"}) == "http://h:1/base/x?q=1#f"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    for name in ("webvoyager", "mind2web"):
        with pytest.raises(UserError, match=r"not a .* task file") as raised:
            load_tasks(compose([f"env={name}", f"env.path={bad}"]).experiment.env)
        assert raised.value.exit_code == 2
        with pytest.raises(UserError, match="needs its task file") as raised:
            load_tasks(compose([f"env={name}"]).experiment.env)
        assert raised.value.exit_code == 2


def test_judge_answers_are_parsed_strictly() -> None:
    assert protocol.webvoyager_verdict("it worked\nSUCCESS") and not protocol.webvoyager_verdict("NOT SUCCESS")
    assert protocol.parse_image_score("Reasoning: x\nScore: 5") == (5, "x")
    assert protocol.parse_outcome('Status: "success"') and not protocol.parse_outcome("Status: failure")
    for parse, text in ((protocol.webvoyager_verdict, "maybe"), (protocol.parse_image_score, "Score: 9"),
                        (protocol.parse_outcome, "done")):
        with pytest.raises(ValueError):
            parse(text)


def _run(tmp_path: Path, name: str, files: dict[str, Path], *extra: str) -> tuple[int, Any, str]:
    script = tmp_path / "browse.py"
    script.write_text("#!/usr/bin/env python3\n" + HARNESS)
    script.chmod(0o755)
    config_dir = _harness_dir(tmp_path, "browse", f"""# forge eval --config-dir DIR +harness=browse
# name
name: browse
# description
description: browses with the REST browser tools and answers
# package
package: {{manager: binary, name: browse, version: "1.0"}}
# runtime
runtime: native
# wire API
wire_api: chat_completions
# entry point
entrypoint: browse
# the program
binary_path: {script}
# command
command: [browse, "{{{{instruction}}}}", "{{{{tools_url}}}}", "{{{{tools_key}}}}"]
# exit codes
exit_codes: {{0: ok}}
# time limit
timeout_s: 120
""")
    return _eval(tmp_path, "+harness=browse", f"+env={name}", f"env.path={files[name]}", NO_UPSTREAM, "proxy.port=0",
                 f"run.output_dir={tmp_path / 'runs'}", "eval.trials=1", *extra, config_dir=config_dir)


def _results(report: Any) -> dict[str, dict[str, Any]]:
    run_dir = Path(report["meta"]["run_dir"])
    return {r["task_id"]: r for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("name", ["webvoyager", "mind2web"])
def test_local_sites_end_to_end_through_the_judge(name: str, tmp_path: Path, judge: Judge,
                                                  sites: dict[str, str]) -> None:
    requires("web")
    code, report, stderr = _run(tmp_path, name, _files(tmp_path), _url_map(sites),
                                f"eval.judge.base_url={judge.url}", "eval.judge.model=scripted")
    assert code == 0, stderr
    results = _results(report)
    solved, unsolved = ("Shop--0", "Docs--0") if name == "webvoyager" else ("5b1e0c7a", "9f3d2a11")
    assert (results[solved]["reward"], results[solved]["passed"]) == (1.0, True), results[solved]
    assert (results[unsolved]["reward"], results[unsolved]["passed"]) == (0.0, False), results[unsolved]
    for result in results.values():
        judge_dir = Path(result["logs"]) / "judge"
        inputs = json.loads((judge_dir / "inputs.json").read_text())
        # the judge's inputs, kept per rollout: the task, the answer, the actions, the screenshots (files)
        assert inputs["answer"] and inputs["actions"][0].startswith("browser_snapshot")
        assert inputs["screenshots"] and all(Path(p).is_file() for p in inputs["screenshots"])
        assert (judge_dir / "answers.json").is_file()
    shop = json.loads((Path(results[solved]["logs"]) / "judge" / "inputs.json").read_text())
    assert "The answer is 42" in shop["answer"] and shop["final_url"].endswith("/blue.html")
    assert len(shop["screenshots"]) == 2  # after the click, and at the end
    stages = [r["system"] for r in judge.requests]
    if name == "webvoyager":
        assert stages == [protocol.WEBVOYAGER_SYSTEM[:40]] * 2 and all(r["images"] == 2 for r in judge.requests)
    else:  # per task: key points, one relevance score per screenshot, the outcome with the kept screenshots
        assert stages.count(protocol.KEY_POINTS_SYSTEM[:40]) == 2 and stages.count(protocol.OUTCOME_SYSTEM[:40]) == 2
        # the shop: after the click and at the end; the form (no link to follow): at the end
        assert sorted(r["images"] for r in judge.requests if r["system"] == protocol.OUTCOME_SYSTEM[:40]) == [1, 2]


def test_a_judge_that_is_down_leaves_the_trial_not_judged(tmp_path: Path, sites: dict[str, str]) -> None:
    requires("web")
    code, report, stderr = _run(tmp_path, "webvoyager", _files(tmp_path), _url_map(sites), "env.task_ids=[Shop--0]",
                                "eval.judge.base_url=http://127.0.0.1:9/v1", "eval.judge.model=gone",
                                "eval.judge.retries=1", "eval.retries=0")
    assert code == 0, stderr
    (result,) = _results(report).values()
    assert result["reward"] is None and result["passed"] is None and "not judged" in result["error"]
    assert result["status"] != "infra_error"
