"""How often does the default model answer a real harness's first request with a usable tool call, and in which
format is it best at it? (issue 32, item 1)

    .venv/bin/python benchmarks/tool_call_rate.py [--harnesses pi,mini-swe-agent,codex] [--split val]
        [--samples 4] [--temperature 0.7] [--max-tokens 160] [--concurrency 8] [--output-dir runs/tool-call-rate]
        [--json FILE]
        [-- OVERRIDES]

1. **The requests.** Each harness runs every ``--split`` task once (``forge rollout``, OVERRIDES such as
   ``runtime=docker`` applied) against a stand-in upstream that answers every call with a short final answer in
   prose: what the harness sends **first** for a task does not depend on any answer, and the proxy records it as
   it forwards it (``upstream_request``, or ``request`` where the proxy forwarded it unchanged: system, messages
   and tools in Chat Completions form, after the proxy's wire-format translation for Codex). Nothing of the
   policy is involved yet.
2. **The replies.** The default model is served by vLLM (``forge_cli.serve``, the embedded defaults) and each first
   request is rendered with each format's chat template (``benchmarks/_tool_formats.py``: forge's ``hermes``,
   SmolLM2's own ``<tool_call>[...]</tool_call>`` list, a bare JSON list) and completed ``--samples`` times at
   ``--temperature`` (no prefilled tokens, no guided decoding), plus once greedily.
3. **The judgement.** A reply counts when it parses as a structured call in that format, every call names a tool
   the request offered, and its arguments validate against that tool's JSON schema. Rates per harness and
   format, with 95% bootstrap intervals that resample templates (task types), for the sampled replies and the
   greedy ones.

The ``--split`` is ``val`` by default: the format is a choice, and choices are made on ``val``. Resumable: a
harness's recorded requests (``OUTPUT_DIR/toolcalls-<harness>-*/first-requests.json``) and each finished harness x
format cell (``OUTPUT_DIR/cells/``, same sampling options) are reused.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _tool_formats import FORMATS, judge  # type: ignore[import-not-found]  # noqa: E402
from learning import machine, pct  # type: ignore[import-not-found]  # noqa: E402
from teacher_standin import Teacher, TeacherServer, _completion  # type: ignore[import-not-found]  # noqa: E402

from forge_cli.eval.metrics import bootstrap_mean_ci  # noqa: E402

MEASURES = ("call", "offered", "valid")


class Prose(Teacher):
    """Answers every request with a short final answer and no tool call: the harness's first request is all
    that is needed of it."""

    def __init__(self) -> None:
        super().__init__([])

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, _completion(body, {"role": "assistant", "content": "I have nothing more to add."})


def say(message: str) -> None:
    print(f"[tool-call-rate] {message}", file=sys.stderr, flush=True)


def first_requests(run_dir: Path) -> list[dict[str, Any]]:
    """Each rollout's first forwarded request (its lowest ``seq``), with the task it was for."""
    tasks = {json.loads(line)["rollout_id"]: json.loads(line)["task_id"]
             for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()}
    with sqlite3.connect(f"file:{run_dir / 'traces.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT rollout_id, COALESCE(upstream_request, request) FROM calls c WHERE seq = "
                          "(SELECT MIN(seq) FROM calls d WHERE d.rollout_id = c.rollout_id)").fetchall()
    out = []
    for rollout_id, body in rows:
        request = json.loads(body) if body else None
        if rollout_id in tasks and isinstance(request, dict) and request.get("messages"):
            out.append({"task_id": tasks[rollout_id], "messages": request["messages"],
                        "tools": request.get("tools") or []})
    return sorted(out, key=lambda r: r["task_id"])


def record(harness: str, args: argparse.Namespace, extra: list[str]) -> list[dict[str, Any]]:
    """The harness's first request for every task (recorded once, then reused)."""
    for done in sorted(args.output_dir.glob(f"toolcalls-{harness}-2*/first-requests.json")):
        say(f"{harness}: reusing {done.parent}")
        return list(json.loads(done.read_text()))
    for recorded in sorted(args.output_dir.glob(f"toolcalls-{harness}-2*/results.jsonl")):
        if recorded.stat().st_size and first_requests(recorded.parent):  # recorded, not yet extracted
            return keep(recorded.parent)
    with TeacherServer(Prose()) as server:
        cmd = [sys.executable, "-m", "forge_cli", "rollout", "--json", f"+harness={harness}", f"env.split={args.split}",
               "model=openai-compatible", f"model.base_url={server.base_url}", "model.model=stand-in",
               "model.request_token_ids=false", "rollout.samples_per_task=1", f"run.output_dir={args.output_dir}",
               f"run.name=toolcalls-{harness}", "proxy.port=0", *extra]
        say(f"{harness}: recording first requests: {' '.join(cmd[2:])}")
        done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"[tool-call-rate] forge rollout through {harness} failed (exit {done.returncode})")
    return keep(Path(json.loads(done.stdout)["run_dir"]))


def keep(run_dir: Path) -> list[dict[str, Any]]:
    requests = first_requests(run_dir)
    if not requests:
        raise SystemExit(f"[tool-call-rate] {run_dir}: no rollout made a model call")
    (run_dir / "first-requests.json").write_text(json.dumps(requests) + "\n")
    say(f"{run_dir.name}: {len(requests)} first requests")
    return requests


def render(tokenizer: Any, request: dict[str, Any], fmt: Any) -> list[int]:
    """The first request's prompt ids under the format's chat template (no special tokens added: ChatML)."""
    text = tokenizer.apply_chat_template(request["messages"], tools=request["tools"] or None,
                                         chat_template=fmt.template, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def template_of(task_id: str) -> str:
    return task_id.rsplit("-", 1)[0]


def rates(judged: list[tuple[str, dict[str, bool]]]) -> dict[str, Any]:
    """Per measure: the share of replies, with a 95% interval resampling task templates."""
    out: dict[str, Any] = {"replies": len(judged)}
    clusters = [template_of(task) for task, _ in judged]
    for measure in MEASURES:
        values = [float(verdict[measure]) for _, verdict in judged]
        low, high = bootstrap_mean_ci(values, clusters=clusters)
        out[measure] = {"rate": sum(values) / len(values), "low": low, "high": high}
    return out


def measure(url: str, model: str, tokenizer: Any, requests: list[dict[str, Any]], fmt: Any,
            args: argparse.Namespace) -> dict[str, Any]:
    """One harness x format cell: every first request completed ``--samples`` times and once greedily, up to
    ``--concurrency`` requests in flight (vLLM batches them; seeded only one at a time, see ``--concurrency``)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def complete(job: tuple[int, dict[str, Any], float, int]) -> list[tuple[float, str, dict[str, bool], str]]:
        n, request, temperature, count = job
        body = {"model": model, "prompt": render(tokenizer, request, fmt), "max_tokens": args.max_tokens,
                "temperature": temperature, "n": count, "skip_special_tokens": False}
        if args.concurrency == 1:  # vLLM 0.32's CPU engine dies on a seeded request batched with a chunked prefill
            body["seed"] = args.seed + n  # ("CPU Generator does not use offset"): seeds only one at a time
        reply = client.post(url + "/completions", json=body)
        reply.raise_for_status()
        out = []
        for choice in reply.json()["choices"]:
            text = str(choice["text"]).split("<|im_end|>")[0]
            out.append((temperature, request["task_id"], judge(fmt.parse(text), request["tools"]), text))
        return out

    jobs = [(n, request, temperature, count) for n, request in enumerate(requests)
            for temperature, count in ((args.temperature, args.samples), (0.0, 1))]
    with httpx.Client(timeout=900) as client, ThreadPoolExecutor(args.concurrency) as pool:
        replies = [reply for done in pool.map(complete, jobs) for reply in done]  # in the jobs' order
    sampled = [(task, verdict) for temperature, task, verdict, _ in replies if temperature > 0]
    greedy = [(task, verdict) for temperature, task, verdict, _ in replies if temperature == 0]
    examples = [{"task_id": task, "reply": text[:300], **verdict}
                for temperature, task, verdict, text in replies if temperature > 0][:3]
    return {"sampled": rates(sampled), "greedy": rates(greedy),
            "prompt_tokens_first": len(render(tokenizer, requests[-1], fmt)), "examples": examples}


def interval(figure: dict[str, float]) -> str:
    return f"{pct(figure['rate'])} ({pct(figure['low'])}..{pct(figure['high'])})"


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harnesses", default="pi,mini-swe-agent,codex")
    parser.add_argument("--formats", default=",".join(FORMATS), help=f"of {', '.join(FORMATS)}")
    parser.add_argument("--split", default="val", help="val: the format is a choice (test is never read here)")
    parser.add_argument("--samples", type=int, default=4, help="sampled replies per request")
    parser.add_argument("--temperature", type=float, default=0.7, help="of the sampled replies (training's)")
    parser.add_argument("--max-tokens", type=int, default=160, help="per reply (the default model.max_output_tokens)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight at once (1: each seeded with "
                        "--seed + its index, reproducible; more: unseeded, as vLLM's CPU engine fails on seeded "
                        "requests batched with a chunked prefill)")
    parser.add_argument("--output-dir", type=Path, default=REPO / "runs" / "tool-call-rate")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    unknown = set(args.formats.split(",")) - set(FORMATS)
    if unknown:
        parser.error(f"--formats: unknown {', '.join(sorted(unknown))} (known: {', '.join(FORMATS)})")
    if args.split == "test":
        parser.error("--split test: the format is chosen here, and choices are made on val")
    return args, extra


def main() -> int:
    args, extra = parse(sys.argv[1:])
    args.output_dir.mkdir(parents=True, exist_ok=True)
    harnesses = [h for h in args.harnesses.split(",") if h]
    requests = {h: record(h, args, extra) for h in harnesses}
    from transformers import AutoTokenizer

    from forge_cli.config.compose import compose
    from forge_cli.serve import start_server
    from forge_cli.train.loop import model_directory

    exp = compose([]).experiment
    tokenizer = AutoTokenizer.from_pretrained(str(model_directory(exp)))
    longest = max(len(render(tokenizer, r, FORMATS[name])) for reqs in requests.values() for r in reqs
                  for name in args.formats.split(","))
    context = max(exp.model.max_model_len, longest + args.max_tokens + 64)
    say(f"serving the default model with a {context}-token context (the longest first prompt: {longest} tokens)")
    results: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    model = compose([f"model.max_model_len={context}"]).experiment.model
    with start_server(model, port=0, log_path=args.output_dir / "vllm.log", timeout=900) as server:
        for harness in harnesses:
            for name in args.formats.split(","):
                cell = args.output_dir / "cells" / f"{harness}-{name}.json"  # a finished cell is reused
                same = {k: getattr(args, k) for k in ("split", "samples", "temperature", "max_tokens", "seed")}
                if cell.is_file() and json.loads(cell.read_text()).get("options") == same:
                    say(f"{harness} x {name}: reusing {cell}")
                    results.setdefault(harness, {})[name] = json.loads(cell.read_text())["figures"]
                    continue
                say(f"{harness} x {name}: {len(requests[harness])} first requests")
                begun = time.monotonic()
                figures = measure(server.base_url, server.model, tokenizer, requests[harness], FORMATS[name], args)
                figures["measure_s"] = round(time.monotonic() - begun)
                figures["seeded"], figures["concurrency"] = args.concurrency == 1, args.concurrency
                results.setdefault(harness, {})[name] = figures
                cell.parent.mkdir(exist_ok=True)
                cell.write_text(json.dumps({"options": same, "figures": figures}, indent=2) + "\n")
    print(f"\nfirst replies of the default model that are a structured call naming an offered tool with arguments "
          f"valid against its schema ({args.split} tasks; {args.samples} samples at T={args.temperature} / greedy; "
          f"95% interval, templates resampled)")
    print(f"  {'harness':16} {'format':10} {'sampled':>24} {'greedy':>24} {'any call (sampled)':>20}")
    for harness, by_format in results.items():
        for name, r in by_format.items():
            sampled, greedy = (interval(r[kind]["valid"]) for kind in ("sampled", "greedy"))
            print(f"  {harness:16} {name:10} {sampled:>24} {greedy:>24} {pct(r['sampled']['call']['rate']):>20}")
    pooled = {name: sum(results[h][name]["sampled"]["valid"]["rate"] for h in results) / len(results)
              for name in args.formats.split(",")}
    best = max(pooled, key=lambda n: pooled[n])
    print(f"  best format (mean sampled rate over the harnesses): {best} ({pct(pooled[best])})")
    out = args.json or args.output_dir / "tool-call-rate.json"
    out.write_text(json.dumps({"options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                               "overrides": extra, "machine": machine(), "tasks": {h: len(r) for h, r in
                                                                                   requests.items()},
                               "results": results, "pooled_valid_rate": pooled, "best": best,
                               "measure_s": round(time.monotonic() - started)}, indent=2) + "\n")
    say(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
