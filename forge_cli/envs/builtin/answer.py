"""Family ``answer``: answer a question from the workspace's files into answer.txt (``checks.answer``).

Unseen templates: ``two-files``, ``config-value``, ``total-hours`` and ``nth-line-guided`` (test); ``count-city``
and ``version-guided`` (val).
"""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import CITIES, NAMES, WORDS, Instance, guided, template, text

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


@template(FAMILY, "easy", guided=True)
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
    """Compare numbers across lines (``sort -n``) and report the name on the top (or bottom) one."""
    people = rng.sample(NAMES, rng.randint(5, 8))
    scores = rng.sample(range(10, 100), len(people))
    name, highest = rng.choice(["scores.txt", "results.txt", "points.txt", "grades.txt", "ranks.txt",
                                  "marks.txt"]), rng.random() < 0.5
    best = max(scores) if highest else min(scores)
    return _answer(
        f"Each line of {name} is a name and a score. Who has the {'highest' if highest else 'lowest'} score?",
        {name: text(f"{p} {s}" for p, s in zip(people, scores, strict=True))},
        people[scores.index(best)], f"sort -k2,2 -n {'-r ' if highest else ''}{name} | head -n 1 | cut -d' ' -f1")


@template(FAMILY, "medium")
def meeting_date(rng: random.Random) -> Instance:
    """Find the one line about an event among similar ones and pull the date out of it."""
    events = rng.sample(EVENTS, 4)
    dates = [f"2024-{month:02d}-{rng.randint(1, 28):02d}" for month in rng.sample(range(1, 13), 4)]
    lines = ["# Notes", *(f"- The {e} meeting is on {d}." for e, d in zip(events, dates, strict=True)),
             "- Bring the slides."]
    which, name = rng.randrange(4), rng.choice(["notes.md", "agenda.md", "calendar.md"])
    return _answer(
        f"{name} lists upcoming meetings. On what date is the {events[which]} meeting? Give the date as "
        "YYYY-MM-DD.",
        {name: text(lines)}, dates[which],
        f"grep -w {events[which]} {name} | grep -o '[0-9]\\{{4\\}}-[0-9]\\{{2\\}}-[0-9]\\{{2\\}}'")


@template(FAMILY, "hard", held_out="test")
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


@template(FAMILY, "easy", guided=True)
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


@template(FAMILY, "easy", guided=True)
def last_entry_guided(rng: random.Random) -> Instance:
    """Guided: the answer is a file's last line, found with the shown ``tail``."""
    stem = rng.choice(["visits", "orders", "events", "signups", "logins", "votes", "entries", "bids", "calls",
                       "sales", "posts", "tickets"])
    name = f"{stem}.txt"
    rows = [f"{person} {rng.randint(10, 99)}" for person in rng.sample(NAMES, rng.randint(3, 7))]
    command = f"tail -n 1 {name} > answer.txt"
    return Instance(instruction=guided(f"Write the last line of {name} into answer.txt.", command),
                    files={name: text(rows)}, check=checks.answer, args={"path": "answer.txt", "expected": [rows[-1]]},
                    solution=command)


@template(FAMILY, "medium", held_out="test")
def config_value(rng: random.Random) -> Instance:
    """A value from one section of an ini file where every section has the same keys."""
    sections = rng.sample(["server", "database", "cache", "mail", "queue"], 3)
    ports = rng.sample(range(1024, 9999), 3)
    lines = [line for section, port in zip(sections, ports, strict=True)
             for line in (f"[{section}]", f"host = {rng.choice(WORDS)}.local", f"port = {port}", "")]
    which = rng.randrange(3)
    name = rng.choice(["app.ini", "services.ini", "deploy.ini"])
    return _answer(
        f"{name} has several sections. Which port does its [{sections[which]}] section use?",
        {name: text(lines)}, str(ports[which]),
        f"sed -n '/^\\[{sections[which]}\\]/,/^$/p' {name} | grep '^port' | cut -d' ' -f3")


@template(FAMILY, "medium", held_out="test")
def total_hours(rng: random.Random) -> Instance:
    """Sum the hours of one person over a timesheet's lines (``awk``)."""
    people = rng.sample(NAMES, 3)
    rows = [(rng.choice(people), rng.randint(1, 8)) for _ in range(rng.randint(6, 10))]
    who = rng.choice([person for person, _ in rows])
    total = sum(hours for person, hours in rows if person == who)
    return _answer(
        f"Each line of timesheet.txt is a name and a number of hours worked. How many hours did {who} work in "
        "total?", {"timesheet.txt": text(f"{person} {hours}" for person, hours in rows)}, str(total),
        f"awk '$1 == \"{who}\" {{s += $2}} END {{print s}}' timesheet.txt")


@template(FAMILY, "easy", guided=True, held_out="test")
def nth_line_guided(rng: random.Random) -> Instance:
    """Guided: the answer is a numbered line of a file, printed with the shown ``sed -n``."""
    name = f"{rng.choice(['queue', 'ranking', 'lineup', 'roster'])}.txt"
    rows = rng.sample(NAMES, rng.randint(4, 7))
    n = rng.randint(2, len(rows) - 1)
    command = f"sed -n '{n}p' {name} > answer.txt"
    return Instance(instruction=guided(f"Write line {n} of {name} into answer.txt.", command),
                    files={name: text(rows)}, check=checks.answer,
                    args={"path": "answer.txt", "expected": [rows[n - 1]]}, solution=command)


@template(FAMILY, "medium", held_out="val")
def count_city(rng: random.Random) -> Instance:
    """Count the rows with one value in a column (``grep -c``)."""
    rows = [(person, rng.choice(CITIES[:4])) for person in rng.sample(NAMES, rng.randint(6, 10))]
    city, name = rng.choice([c for _, c in rows]), rng.choice(["people.txt", "homes.txt", "residents.txt"])
    return _answer(
        f"{name} lists a person and their city on each line. How many of them live in {city}?",
        {name: text(f"{person} {c}" for person, c in rows)}, str(sum(c == city for _, c in rows)),
        f"grep -c ' {city}$' {name}")


@template(FAMILY, "easy", guided=True, held_out="val")
def version_guided(rng: random.Random) -> Instance:
    """Guided: the answer is a key's value in a key=value file, with the shown ``grep | cut``."""
    name = rng.choice(["package.txt", "release.txt", "build.txt", "meta.txt"])
    version, key = f"{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}", rng.choice(["version", "release"])
    rows = [f"name={rng.choice(WORDS)}", f"{key}={version}", f"owner={rng.choice(NAMES)}"]
    command = f"grep '^{key}=' {name} | cut -d= -f2 > answer.txt"
    return Instance(instruction=guided(f"Write the {key} given in {name} into answer.txt.", command),
                    files={name: text(rows)}, check=checks.answer, args={"path": "answer.txt", "expected": [version]},
                    solution=command)
