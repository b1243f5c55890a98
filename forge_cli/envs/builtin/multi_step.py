"""Family ``multi-step``: chores of several file operations, each step credited (``checks.files``).

Unseen templates: ``make-files``, ``split-by-level``, ``rename-ext`` and ``tar-guided`` (test); ``copy-and-count``
and ``remove-empty-guided`` (val).
"""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import NAMES, STEMS, Instance, guided, phrase, template, text, words

FAMILY = "multi-step"


def _contents(rng: random.Random, paths: list[str]) -> dict[str, str]:
    """A short distinct text for each path."""
    return {path: text([phrase(rng)]) for path in paths}


@template(FAMILY, "easy", guided=True)
def backup_copy(rng: random.Random) -> Instance:
    """Two commands, shown in the instruction: ``mkdir`` and ``cp``; the original must stay."""
    name, folder = f"{rng.choice(STEMS)}.txt", rng.choice(["backup", "archive", "copies"])
    files = _contents(rng, [name])
    command = f"mkdir {folder} && cp {name} {folder}/"
    return Instance(
        instruction=f"Create a directory named {folder} and copy {name} into it, keeping the original {name} where "
                    f"it is (for example: {command}).",
        files=files,
        check=checks.files, args={"goals": {f"{folder}/{name}": files[name]}, "keep": files},
        solution=command)


@template(FAMILY, "medium")
def cleanup_tmp(rng: random.Random) -> Instance:
    """Delete by pattern through subdirectories (``find -delete``); the other files must stay."""
    ext = rng.choice(["tmp", "bak", "old", "swp", "orig", "temp", "part", "cache"])
    sub = rng.choice(["cache", "build", "work"])
    stems = words(rng, 7)
    optional = [f"{stems[0]}.{ext}", f"{stems[1]}.{ext}", f"{sub}/{stems[2]}.{ext}"]
    doomed = [*optional[:rng.randint(2, 3)], f"{sub}/{stems[3]}.{ext}"]
    kept = [f"{stems[4]}.txt", f"{stems[5]}.log", f"{sub}/{stems[6]}.txt"]
    files = _contents(rng, doomed + kept)
    return Instance(
        instruction=f"Delete every file whose name ends in `.{ext}`, in the current directory and in all its "
                    f"subdirectories (such as {sub}); keep every other file.",
        files=files,
        check=checks.files, args={"goals": dict.fromkeys(doomed), "keep": {path: files[path] for path in kept}},
        solution=f"find . -type f -name '*.{ext}' -delete")


@template(FAMILY, "medium")
def move_by_ext(rng: random.Random) -> Instance:
    """Make a directory and move the files of one extension into it; the other files stay."""
    ext, others = rng.choice([("txt", ("csv", "md")), ("md", ("txt", "csv")), ("csv", ("md", "log"))])
    source, target = rng.choice(["inbox", "downloads", "incoming"]), rng.choice(["texts", "sorted", "done"])
    stems = words(rng, 5)
    moved = [f"{stem}.{ext}" for stem in stems[:rng.randint(2, 3)]]
    stay = [f"{stems[3]}.{others[0]}", f"{stems[4]}.{others[1]}"]
    files = _contents(rng, [f"{source}/{name}" for name in moved + stay])
    goals: dict[str, str | None] = {f"{target}/{name}": files[f"{source}/{name}"] for name in moved}
    goals.update(dict.fromkeys(f"{source}/{name}" for name in moved))
    return Instance(
        instruction=f"Move every .{ext} file from the {source} directory into a new directory named {target}, so "
                    f"that {source} keeps only its other files.",
        files=files,
        check=checks.files,
        args={"goals": goals, "keep": {f"{source}/{name}": files[f"{source}/{name}"] for name in stay}},
        solution=f"mkdir -p {target} && mv {source}/*.{ext} {target}/")


@template(FAMILY, "hard")
def sort_and_count(rng: random.Random) -> Instance:
    """Two outputs from one input: the sorted lines, then their count; the input itself must stay."""
    source, out = rng.choice(["names.txt", "people.txt", "guests.txt", "team.txt"]), rng.choice(["sorted", "order"])
    count = rng.choice(["count.txt", "n.txt"])
    names = rng.sample(NAMES, rng.randint(5, 9))
    if names == sorted(names):
        names.reverse()
    files = {source: text(names)}
    return Instance(
        instruction=f"Sort the lines of {source} alphabetically into a new file {out}.txt, then write the number "
                    f"of lines of {out}.txt (only the number) into {count}.",
        files=files,
        check=checks.files, args={"goals": {f"{out}.txt": text(sorted(names)), count: str(len(names))},
                                  "keep": files},
        solution=f"sort {source} > {out}.txt && wc -l < {out}.txt > {count}", secrets=(str(len(names)),))


@template(FAMILY, "hard", held_out="test")
def make_files(rng: random.Random) -> Instance:
    """A directory of three files, each holding its own name: a loop or three writes."""
    folder, stems = rng.choice(["out", "parts", "pieces"]), words(rng, 3)
    listed = f"{stems[0]}.txt, {stems[1]}.txt and {stems[2]}.txt"
    return Instance(
        instruction=f"Create a directory named {folder} containing three files {listed}; each must contain just "
                    f"its own name without `.txt` (so {folder}/{stems[0]}.txt contains `{stems[0]}`).",
        check=checks.files, args={"goals": {f"{folder}/{stem}.txt": stem for stem in stems}},
        solution=f"mkdir -p {folder} && for w in {' '.join(stems)}; do echo \"$w\" > \"{folder}/$w.txt\"; done")


@template(FAMILY, "easy", guided=True)
def dir_and_file_guided(rng: random.Random) -> Instance:
    """Guided: two steps in one shown command line (a directory, then a file in it)."""
    folder, name, said = rng.choice(["out", "build", "done", "results"]), f"{rng.choice(STEMS)}.txt", words(rng, 1)[0]
    command = f"mkdir -p {folder} && echo {said} > {folder}/{name}"
    return Instance(instruction=guided(f"Create a directory {folder} with a file {name} in it containing `{said}`.",
                                       command),
                    check=checks.files, args={"goals": {f"{folder}/{name}": said + "\n"}}, solution=command)


@template(FAMILY, "easy", guided=True)
def archive_guided(rng: random.Random) -> Instance:
    """Guided: the files of one extension moved into a new folder with the shown ``mkdir`` and ``mv``; the others
    stay."""
    ext, folder = rng.choice(["log", "bak", "old"]), rng.choice(["old", "archive", "logs", "attic"])
    stems = words(rng, rng.randint(3, 5))
    moved, kept = [f"{stem}.{ext}" for stem in stems[:-1]], [f"{stems[-1]}.txt"]
    files = _contents(rng, moved + kept)
    command = f"mkdir {folder} && mv *.{ext} {folder}/"
    return Instance(instruction=guided(f"Move the .{ext} files into a new folder {folder}.", command), files=files,
                    check=checks.files,
                    args={"goals": {**{f"{folder}/{name}": files[name] for name in moved}, **dict.fromkeys(moved)},
                          "keep": {path: files[path] for path in kept}},
                    solution=command)


@template(FAMILY, "hard", held_out="test")
def split_by_level(rng: random.Random) -> Instance:
    """One log split into two files by level, in order; the log itself must stay."""
    name = rng.choice(["app.log", "server.log", "build.log", "worker.log"])
    errors, warnings = rng.choice([("errors.txt", "warnings.txt"), ("error.log", "warn.log"), ("bad.txt", "meh.txt")])
    log = [f"{rng.choice(['ERROR', 'WARN'])} {' '.join(words(rng, 2))}" for _ in range(rng.randint(6, 10))]
    log[0], log[-1] = "ERROR " + log[0].split(" ", 1)[1], "WARN " + log[-1].split(" ", 1)[1]
    files = {name: text(log)}
    return Instance(
        instruction=f"Split {name}: write its ERROR lines into {errors} and its WARN lines into {warnings}, each "
                    f"in the original order, and leave {name} as it is.",
        files=files,
        check=checks.files,
        args={"goals": {errors: text(line for line in log if line.startswith("ERROR ")),
                        warnings: text(line for line in log if line.startswith("WARN "))}, "keep": files},
        solution=f"grep '^ERROR ' {name} > {errors} && grep '^WARN ' {name} > {warnings}")


@template(FAMILY, "medium", held_out="test")
def rename_ext(rng: random.Random) -> Instance:
    """Every file of one extension in a directory renamed to another (a loop over ``mv``); contents unchanged."""
    folder, (old, new) = rng.choice(["docs", "notes", "pages"]), rng.choice([("txt", "md"), ("md", "txt"),
                                                                            ("htm", "html"), ("jpeg", "jpg")])
    stems = words(rng, rng.randint(2, 4))
    files = _contents(rng, [f"{folder}/{stem}.{old}" for stem in stems])
    goals: dict[str, str | None] = {f"{folder}/{stem}.{new}": files[f"{folder}/{stem}.{old}"] for stem in stems}
    goals.update(dict.fromkeys(f"{folder}/{stem}.{old}" for stem in stems))
    return Instance(
        instruction=f"Rename every .{old} file in the {folder} directory so that it ends in .{new} instead (same "
                    "name otherwise, same content).",
        files=files, check=checks.files, args={"goals": goals},
        solution=f"for f in {folder}/*.{old}; do mv \"$f\" \"${{f%.{old}}}.{new}\"; done")


@template(FAMILY, "easy", guided=True, held_out="test")
def tar_guided(rng: random.Random) -> Instance:
    """Guided: a directory packed into a gzip'd tar archive with the shown ``tar``; checked by listing it."""
    folder, archive = rng.choice(["docs", "site", "config", "notes"]), rng.choice(["backup", "bundle", "snapshot"])
    paths = [f"{folder}/{stem}.txt" for stem in sorted(words(rng, rng.randint(2, 4)))]
    command = f"tar -czf {archive}.tar.gz {folder}"
    listing = sorted([f"{folder}/", *paths])
    return Instance(instruction=guided(f"Pack the {folder} directory into the archive {archive}.tar.gz.", command),
                    files=_contents(rng, paths), check=checks.outputs,
                    args={"cases": [[f"tar -tzf {archive}.tar.gz | sort", text(listing)]]}, solution=command)


@template(FAMILY, "medium", held_out="val")
def copy_and_count(rng: random.Random) -> Instance:
    """Copy the files of one extension into a new directory, then write how many were copied."""
    ext, folder = rng.choice(["log", "csv", "md"]), rng.choice(["copies", "collected", "gathered"])
    out = rng.choice(["copied.txt", "count.txt"])
    stems = words(rng, 6)
    wanted = rng.randint(2, 4)
    copied = [f"{stem}.{ext}" for stem in stems[:wanted]]
    files = _contents(rng, copied + [f"{stem}.txt" for stem in stems[wanted:]])
    return Instance(
        instruction=f"Copy every .{ext} file of the current directory into a new directory named {folder} (the "
                    f"originals stay), then write how many files you copied (only the number) into {out}.",
        files=files,
        check=checks.files, args={"goals": {**{f"{folder}/{name}": files[name] for name in copied},
                                            out: str(wanted)}, "keep": files},
        solution=f"mkdir -p {folder} && cp *.{ext} {folder}/ && ls {folder} | wc -l > {out}",
        secrets=(str(wanted),))


@template(FAMILY, "easy", guided=True, held_out="val")
def remove_empty_guided(rng: random.Random) -> Instance:
    """Guided: the empty files deleted with the shown ``find``; the others stay."""
    stems = words(rng, rng.randint(4, 6))
    empty = stems[:rng.randint(1, len(stems) - 2)]
    folder = rng.choice(["inbox", "drafts", "scratch", "tmp", "notes", "queue", "spool", "work"])
    full = _contents(rng, [f"{folder}/{stem}.txt" for stem in stems if stem not in empty])
    command = f"find {folder} -type f -empty -delete"
    return Instance(instruction=guided(f"Delete the empty files in {folder}.", command),
                    files={**{f"{folder}/{stem}.txt": "" for stem in empty}, **full}, check=checks.files,
                    args={"goals": dict.fromkeys(f"{folder}/{stem}.txt" for stem in empty), "keep": full},
                    solution=command)
