"""Family ``fix-script``: make a script executable, fix a misspelled command, a wrong operator, a syntax error.

Each is checked by running the fixed script in the workdir on the example the instruction shows and, where the
script takes arguments, on inputs the harness never saw (partial credit: the share of the runs that are right).
"""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import NAMES, Instance, guided, phrase, template, text

FAMILY = "fix-script"


@template(FAMILY, "easy")
def make_executable(rng: random.Random) -> Instance:
    """One command, shown in the instruction: ``chmod +x``."""
    name, said = rng.choice(["tool.sh", "run.sh", "build.sh", "greet.sh"]), phrase(rng)
    return Instance(
        instruction=f"The script {name} is not executable, so `./{name}` fails. Make it executable (for example: "
                    f"chmod +x {name}).",
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


@template(FAMILY, "easy")
def executable_guided(rng: random.Random) -> Instance:
    """Guided: a script that must be executable; the ``chmod`` is shown."""
    name, said = rng.choice(["greet.sh", "deploy.sh", "check.sh", "start.sh"]), phrase(rng)
    command = f"chmod +x {name}"
    return Instance(instruction=guided(f"Fix {name}: it must be executable.", command),
                    files={name: text(["#!/bin/bash", f"echo {said}"])}, check=checks.outputs,
                    args={"cases": [[f"./{name}", said]]}, solution=command)


@template(FAMILY, "easy")
def typo_guided(rng: random.Random) -> Instance:
    """Guided: the typo named, fixed with the shown ``sed``."""
    name, said, typo = rng.choice(["hello.sh", "say.sh", "print.sh"]), phrase(rng), rng.choice(["ecoh", "ehco"])
    command = f"sed -i 's/{typo}/echo/' {name}"
    return Instance(instruction=guided(f"{name} has the typo {typo} where echo belongs. Replace it.", command),
                    files={name: text(["#!/bin/bash", f"{typo} {said}"])}, check=checks.outputs,
                    args={"cases": [[f"bash {name}", said]]}, solution=command)
