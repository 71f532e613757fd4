"""The docs say only what exists: every relative link resolves (its anchor too), and every
`make` target and `tidemark` command they show is one the Makefile and the command line have."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
PAGES = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (lower case, punctuation dropped, spaces to -)."""
    out, fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return out


def test_the_readme_is_short_and_reaches_every_page():
    readme = (CHECKOUT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    linked = {t.split("#")[0] for t in LINK.findall(readme)}
    assert {f"docs/{p.name}" for p in PAGES[1:]} <= linked


def test_every_relative_link_resolves_with_its_anchor():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^(https?|mailto):", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def shown_commands(tool: str) -> set[str]:
    """The subcommands of ``tool`` the docs show in code: `tool x`, `.venv/bin/tool x`."""
    found = set()
    for page in PAGES:
        for code in re.findall(r"```.*?```|`[^`\n]+`", page.read_text(), flags=re.S):
            # a command: at the start of a line or of inline code, or after .venv/bin/
            found |= set(
                re.findall(rf"(?:^[ \t]*|^`|/bin/){tool} ([a-z][a-z0-9-]*)", code, flags=re.M)
            )
    return found


def test_every_make_target_shown_exists():
    makefile = (CHECKOUT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, flags=re.M))
    shown = shown_commands("make")
    assert {"run", "test", "live", "dev"} <= shown
    assert shown - targets == set()


def test_every_tidemark_command_shown_exists():
    helped = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commands = set(re.search(r"\{([a-z0-9,-]+)\}", helped).group(1).split(","))
    shown = shown_commands("tidemark")
    assert {"new", "check", "recon"} <= shown
    assert shown - commands == set()
