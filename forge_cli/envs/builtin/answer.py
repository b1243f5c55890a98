"""Family ``answer``: answer a question from the workspace's files into answer.txt (``checks.answer``)."""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import NAMES, Instance, guided, template, text

FAMILY = "answer"
TEAMS = ("Platform", "Payments", "Search", "Mobile", "Data", "Support", "Billing", "Security")
EVENTS = ("budget", "design", "hiring", "launch", "security", "planning", "review")


def _answer(question: str, files: dict[str, str], answer: str, solution: str, hint: bool = False) -> Instance:
    """An instance whose answer goes, alone, into answer.txt; ``hint``: the instruction shows the solution."""
    command = f"{solution} > answer.txt"
    return Instance(instruction=f"{question} Write only the answer into answer.txt"
                                + (f" (for example: {command})." if hint else "."),
                    files=files, check=checks.answer, args={"path": "answer.txt", "expected": [answer]},
                    solution=command, secrets=(answer,))


@template(FAMILY, "easy")
def lookup(rng: random.Random) -> Instance:
    """One line to find; the instruction shows the command that answers it."""
    people = rng.sample(NAMES, 6)
    numbers = [f"555-{n:04d}" for n in rng.sample(range(100, 9999), 6)]
    who = rng.randrange(6)
    return _answer(
        f"phonebook.txt lists a phone number for each person. What is {people[who]}'s phone number?",
        {"phonebook.txt": text(f"{p}: {n}" for p, n in zip(people, numbers, strict=True))}, numbers[who],
        f"grep '^{people[who]}:' phonebook.txt | cut -d' ' -f2", hint=True)


@template(FAMILY, "medium")
def max_score(rng: random.Random) -> Instance:
    """Compare numbers across lines (``sort -n``) and report the name on the top one."""
    people = rng.sample(NAMES, rng.randint(5, 8))
    scores = rng.sample(range(10, 100), len(people))
    return _answer(
        "Each line of scores.txt is a name and a score. Who has the highest score?",
        {"scores.txt": text(f"{p} {s}" for p, s in zip(people, scores, strict=True))},
        people[scores.index(max(scores))], "sort -k2,2 -n -r scores.txt | head -n 1 | cut -d' ' -f1")


@template(FAMILY, "medium")
def meeting_date(rng: random.Random) -> Instance:
    """Find the one line about an event among similar ones and pull the date out of it."""
    events = rng.sample(EVENTS, 4)
    dates = [f"2024-{month:02d}-{rng.randint(1, 28):02d}" for month in rng.sample(range(1, 13), 4)]
    lines = ["# Notes", *(f"- The {e} meeting is on {d}." for e, d in zip(events, dates, strict=True)),
             "- Bring the slides."]
    which = rng.randrange(4)
    return _answer(
        f"notes.md lists upcoming meetings. On what date is the {events[which]} meeting? Give the date as "
        "YYYY-MM-DD.",
        {"notes.md": text(lines)}, dates[which],
        f"grep -w {events[which]} notes.md | grep -o '[0-9]\\{{4\\}}-[0-9]\\{{2\\}}-[0-9]\\{{2\\}}'")


@template(FAMILY, "hard", held_out=True)
def two_files(rng: random.Random) -> Instance:
    """Join two files: the person's team id in one, the team's name in the other."""
    people, teams = rng.sample(NAMES, 6), rng.sample(TEAMS, 4)
    member = {p: rng.randrange(4) for p in people}
    who = rng.choice(people)
    return _answer(
        f"staff.txt gives each person's team id and teams.txt gives each team id's name. Which team is {who} in? "
        "Answer with the team's name.",
        {"staff.txt": text(f"{p} T{member[p] + 1}" for p in people),
         "teams.txt": text(f"T{i + 1} {t}" for i, t in enumerate(teams))}, teams[member[who]],
        f"grep \"^$(grep '^{who} ' staff.txt | cut -d' ' -f2) \" teams.txt | cut -d' ' -f2-")


@template(FAMILY, "easy")
def line_about_guided(rng: random.Random) -> Instance:
    """Guided: the answer is the line of a file that names a person, found with the shown ``grep``."""
    people = rng.sample(NAMES, rng.randint(4, 7))
    name = f"{rng.choice(['phones', 'rooms', 'desks', 'badges'])}.txt"
    rows = [f"{person} {rng.randint(100, 999)}" for person in people]
    who = rng.choice(people)
    command = f"grep {who} {name} > answer.txt"
    return Instance(instruction=guided(f"Copy the line of {name} with {who} into answer.txt.", command),
                    files={name: text(rows)}, check=checks.answer,
                    args={"path": "answer.txt", "expected": [next(r for r in rows if r.startswith(who + " "))]},
                    solution=command)


@template(FAMILY, "easy")
def last_entry_guided(rng: random.Random) -> Instance:
    """Guided: the answer is a file's last line, found with the shown ``tail``."""
    name = f"{rng.choice(['visits', 'orders', 'events', 'signups'])}.txt"
    rows = [f"{person} {rng.randint(10, 99)}" for person in rng.sample(NAMES, rng.randint(3, 7))]
    command = f"tail -n 1 {name} > answer.txt"
    return Instance(instruction=guided(f"Write the last line of {name} into answer.txt.", command),
                    files={name: text(rows)}, check=checks.answer, args={"path": "answer.txt", "expected": [rows[-1]]},
                    solution=command)
