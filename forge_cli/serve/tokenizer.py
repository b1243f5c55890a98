"""A model's tokenizer, read only to turn token ids back into text (exports, replay diffs): the served model's
directory per a run's ``config.yaml``, and a decoder for it. Never fetches anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from forge_cli.errors import UserError

Decode = Callable[[list[int]], str]


def model_dir_of_run(run_dir: Path) -> Path | None:
    """The served model's directory per the run's ``config.yaml`` (None: unknown, e.g. an external endpoint)."""
    import yaml

    config = run_dir / "config.yaml"
    data = yaml.safe_load(config.read_text()) if config.is_file() else None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return None
    if model.get("source") == "smollm2":
        from forge_cli.serve.prepare import default_model_dir

        return default_model_dir()
    if model.get("source") == "vllm" and model.get("path"):
        return Path(str(model["path"])).expanduser()
    return None


def load_decoder(model_dir: Path) -> Decode:
    """A token-ids -> text decoder for the model in ``model_dir`` (special tokens kept): ``tokenizers`` on the
    directory's ``tokenizer.json`` (a forge dependency; fast to load), else ``transformers``' AutoTokenizer when
    it is installed. Never fetches anything."""
    path = model_dir / "tokenizer.json"
    if path.is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            pass
        else:
            tokenizer = Tokenizer.from_file(str(path))
            return lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False))
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise UserError(f"cannot decode with {model_dir}: no tokenizer.json (or no tokenizers package) and no "
                        "transformers", fix="pass --tokenizer DIR (a model directory with tokenizer.json), or "
                        "--no-text", exit_code=2) from None
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    return lambda ids: str(tok.decode(ids, skip_special_tokens=False))
