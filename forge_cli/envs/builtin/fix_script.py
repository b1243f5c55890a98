"""Family ``fix-script``: make a script executable, fix a misspelled command, a wrong operator, a syntax error.

Each is checked by running the fixed script in the workdir on the example the instruction shows and, where the
script takes arguments, on inputs the harness never saw (partial credit: the share of the runs that are right).

Unseen templates: ``fix-shebang``, ``fix-variable``, ``fix-filename`` and ``exit-code-guided`` (test);
``fix-range`` and ``import-guided`` (val).
"""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import NAMES, STEMS, Instance, guided, phrase, template, text, words

FAMILY = "fix-script"
SCRIPTS = ("tool.sh", "run.sh", "build.sh", "greet.sh", "deploy.sh", "setup.sh", "start.sh", "clean.sh")


@template(FAMILY, "easy", guided=True)
def make_executable(rng: random.Random) -> Instance:
    """One command, shown in the instruction: ``chmod +x``."""
    name, said = rng.choice(SCRIPTS), phrase(rng)
    return Instance(
        instruction=f"The script {name} (it prints `{said}`) is not executable, so `./{name}` fails. Make it "
                    f"executable (for example: chmod +x {name}).",
        files={name: text(["#!/bin/bash", f"echo {said}"])},
        check=checks.outputs, args={"cases": [[f"./{name}", said]]},
        solution=f"chmod +x {name}")


@template(FAMILY, "easy")
def fix_typo(rng: random.Random) -> Instance:
    """The misspelled command is named in the instruction; one ``sed`` or a rewrite fixes it."""
    name, said, typo = rng.choice(["hello.sh", "say.sh", "print.sh"]), phrase(rng), rng.choice(["ecoh", "ehco", "ech"])
    return Instance(
        instruction=f"{name} should print `{said}`, but its command is misspelled as `{typo}`. Fix {name} so that "
                    f"`bash {name}` prints {said}.",
        files={name: text(["#!/bin/bash", f"{typo} {said}"])},
        check=checks.outputs, args={"cases": [[f"bash {name}", said]]},
        solution=f"sed -i 's/^{typo} /echo /' {name}")


_OPERATIONS = {"sum": ("+", "-", lambda a, b: a + b), "product": ("*", "+", lambda a, b: a * b),
               "difference (first minus second)": ("-", "+", lambda a, b: a - b)}


@template(FAMILY, "medium")
def fix_operator(rng: random.Random) -> Instance:
    """A wrong operator in a Python function; checked on the shown example and two hidden inputs."""
    what = rng.choice(sorted(_OPERATIONS))
    right, wrong, fn = _OPERATIONS[what]
    pairs = [(rng.randint(3, 12), rng.randint(3, 12)) for _ in range(3)]
    script = ["import sys", "", "", "def combine(a, b):", f"    return a {wrong} b", "", "",
              "print(combine(int(sys.argv[1]), int(sys.argv[2])))"]
    (a, b) = pairs[0]
    return Instance(
        instruction=f"calc.py should print the {what} of its two number arguments, but it computes the wrong "
                    f"thing. Fix calc.py so that, for example, `python3 calc.py {a} {b}` prints {fn(a, b)}.",
        files={"calc.py": text(script)},
        check=checks.outputs, args={"cases": [[f"python3 calc.py {x} {y}", str(fn(x, y))] for x, y in pairs]},
        solution=f"sed -i 's/return a {wrong} b/return a {right} b/' calc.py")


@template(FAMILY, "hard")
def fix_syntax(rng: random.Random) -> Instance:
    """A Python syntax error the instruction does not locate (a missing colon or parenthesis)."""
    greeting, people = rng.choice(["Hello", "Hi", "Welcome", "Good morning"]), rng.sample(NAMES, 3)
    missing_colon = rng.random() < 0.5
    header, call = "def greet(name):", "print(greet(sys.argv[1]))"
    broken_header, broken_call = (header[:-1], call) if missing_colon else (header, call[:-1])
    script = ["import sys", "", "", broken_header, f"    return \"{greeting}, \" + name + \"!\"", "", "",
              broken_call]
    fix = (f"sed -i 's/^{broken_header}$/{header}/' greet.py" if missing_colon
           else "sed -i 's/^print(greet(sys.argv\\[1\\])$/&)/' greet.py")
    return Instance(
        instruction=f"greet.py has a syntax error, so `python3 greet.py {people[0]}` fails. Fix greet.py so that "
                    f"this command prints `{greeting}, {people[0]}!`.",
        files={"greet.py": text(script)},
        check=checks.outputs, args={"cases": [[f"python3 greet.py {p}", f"{greeting}, {p}!"] for p in people]},
        solution=fix)


@template(FAMILY, "easy", guided=True)
def executable_guided(rng: random.Random) -> Instance:
    """Guided: a script that must be executable; the ``chmod`` is shown."""
    name, said = rng.choice(SCRIPTS), phrase(rng)
    command = f"chmod +x {name}"
    return Instance(instruction=guided(f"Fix {name}: it must be executable (it prints `{said}`).", command),
                    files={name: text(["#!/bin/bash", f"echo {said}"])}, check=checks.outputs,
                    args={"cases": [[f"./{name}", said]]}, solution=command)


@template(FAMILY, "easy", guided=True)
def typo_guided(rng: random.Random) -> Instance:
    """Guided: the typo named, fixed with the shown ``sed``."""
    name = rng.choice(["hello.sh", "say.sh", "print.sh", "shout.sh", "speak.sh", "tell.sh"])
    said, typo = phrase(rng), rng.choice(["ecoh", "ehco"])
    command = f"sed -i 's/{typo}/echo/' {name}"
    return Instance(instruction=guided(f"{name} has the typo {typo} where echo belongs. Replace it.", command),
                    files={name: text(["#!/bin/bash", f"{typo} {said}"])}, check=checks.outputs,
                    args={"cases": [[f"bash {name}", said]]}, solution=command)


@template(FAMILY, "easy", held_out="test")
def fix_shebang(rng: random.Random) -> Instance:
    """An executable script whose first line names an interpreter that does not exist."""
    name, said = rng.choice(SCRIPTS), phrase(rng)
    broken = rng.choice(["#!/bin/bsh", "#!/bin/bahs", "#!/usr/bin/bsah"])
    return Instance(
        instruction=f"`./{name}` fails with a bad interpreter error: the first line of {name} is wrong. Fix {name} "
                    f"so that `./{name}` prints `{said}`.",
        files={name: text([broken, f"echo {said}"])}, setup=(f"chmod +x {name}",),
        check=checks.outputs, args={"cases": [[f"./{name}", said]]},
        solution=f"sed -i '1s|.*|#!/bin/bash|' {name}")


@template(FAMILY, "medium", held_out="test")
def fix_variable(rng: random.Random) -> Instance:
    """A misspelled variable in a bash script (it expands to nothing); checked on names the instruction never shows."""
    name, greeting = rng.choice(["greet.sh", "hello.sh", "welcome.sh"]), rng.choice(["Hello", "Hi", "Hey"])
    people = rng.sample(NAMES, 3)
    typo = rng.choice(["nmae", "naem", "nme"])
    script = ["#!/bin/bash", 'name="$1"', f'echo "{greeting}, ${typo}!"']
    return Instance(
        instruction=f"{name} should greet the name given as its argument, but `bash {name} {people[0]}` prints "
                    f"`{greeting}, !`. Fix {name} so that it prints `{greeting}, {people[0]}!`.",
        files={name: text(script)},
        check=checks.outputs, args={"cases": [[f"bash {name} {p}", f"{greeting}, {p}!"] for p in people]},
        solution=f"sed -i 's/\\${typo}/$name/' {name}")


@template(FAMILY, "medium", held_out="test")
def fix_filename(rng: random.Random) -> Instance:
    """A script that reads a file that does not exist; the right one is named."""
    data, wrong = f"{rng.choice(STEMS)}.txt", rng.choice(["input.txt", "data.txt", "file.txt"])
    rows = words(rng, rng.randint(3, 9))
    script = rng.choice(["count.sh", "lines.sh", "size.sh"])
    return Instance(
        instruction=f"{script} should print the number of lines of {data}, but it reads a file that does not exist. "
                    f"Fix {script} so that `bash {script}` prints the number of lines of {data}.",
        files={data: text(rows), script: text(["#!/bin/bash", f"wc -l < {wrong}"])},
        check=checks.outputs, args={"cases": [[f"bash {script}", str(len(rows))]]},
        solution=f"sed -i 's/{wrong}/{data}/' {script}", secrets=())


@template(FAMILY, "easy", guided=True, held_out="test")
def exit_code_guided(rng: random.Random) -> Instance:
    """Guided: a script that must exit with status 0, fixed with the shown ``sed``."""
    name, said = rng.choice(["check.sh", "verify.sh", "test.sh", "lint.sh"]), phrase(rng)
    command = f"sed -i 's/exit 1/exit 0/' {name}"
    return Instance(instruction=guided(f"{name} must exit with status 0 (it prints `{said}`).", command),
                    files={name: text(["#!/bin/bash", f"echo {said}", "exit 1"])}, check=checks.outputs,
                    args={"cases": [[f"bash {name}", said]]}, solution=command)


@template(FAMILY, "medium", held_out="val")
def fix_range(rng: random.Random) -> Instance:
    """An off-by-one ``range`` in a Python script; checked on the shown example and two hidden inputs."""
    values = rng.sample(range(3, 15), 3)
    script = ["import sys", "", "n = int(sys.argv[1])", "print(sum(range(1, n)))"]
    return Instance(
        instruction=f"total.py should print the sum of the whole numbers from 1 to N, N included, for its argument "
                    f"N, but its result is too small. Fix total.py so that, for example, `python3 total.py "
                    f"{values[0]}` prints {values[0] * (values[0] + 1) // 2}.",
        files={"total.py": text(script)},
        check=checks.outputs, args={"cases": [[f"python3 total.py {n}", str(n * (n + 1) // 2)] for n in values]},
        solution="sed -i 's/range(1, n)/range(1, n + 1)/' total.py")


@template(FAMILY, "easy", guided=True, held_out="val")
def import_guided(rng: random.Random) -> Instance:
    """Guided: a Python script missing its ``import sys``, added with the shown ``sed``."""
    name = rng.choice(["shout.py", "upper.py", "loud.py", "caps.py", "yell.py", "big.py", "title.py", "raise.py"])
    samples = words(rng, 3)
    command = f"sed -i '1i import sys' {name}"
    return Instance(instruction=guided(f"{name} uses sys without importing it: add the import, so that "
                                       f"`python3 {name} {samples[0]}` prints {samples[0].upper()}.", command),
                    files={name: text(["print(sys.argv[1].upper())"])}, check=checks.outputs,
                    args={"cases": [[f"python3 {name} {w}", w.upper()] for w in samples]}, solution=command)
