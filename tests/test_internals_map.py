"""docs/internals.md's module map names every module of the package and of bench/: a module
added, moved or renamed without its line in the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP_ROW = re.compile(r"^\| [^|]+ \| (?P<packages>[^|]+) \| (?P<text>.+) \|$")


def _map_rows() -> dict[str, str]:
    """Each package the map's table names (`offset_assets/engine/`, ...) -> its row's text."""
    rows: dict[str, str] = {}
    for line in (ROOT / "docs" / "internals.md").read_text().splitlines():
        match = MAP_ROW.match(line)
        if match:
            for package in re.findall(r"`([\w/]+/)`", match["packages"]):
                rows[package] = match["text"]
    return rows


def _modules(package: Path) -> list[Path]:
    """The package's modules, its own and its sub-packages' (migration revisions and
    `__init__.py` files are not modules of the map)."""
    return sorted(p for p in package.rglob("*.py")
                  if p.name != "__init__.py" and "versions" not in p.parts and "__pycache__" not in p.parts)


def _mentions(text: str, module: Path, package: Path) -> bool:
    """The row names the module by its file name, or names the folder it is in (`migrations/`)."""
    folder = module.relative_to(package).parts[0]
    return re.search(rf"(?<![\w/]){re.escape(module.name)}", text) is not None or f"`{folder}/`" in text


def test_every_module_is_in_the_internals_map():
    rows = _map_rows()
    missing = []
    for package, text in rows.items():
        if package == "assets_defs/":
            continue  # the reference project, one line of the map; its modules are its story
        folder = ROOT / package
        nested = [other for other in rows if other != package and other.startswith(package)]
        for module in _modules(folder):
            if any(module.is_relative_to(ROOT / other) for other in nested):
                continue  # the nested package's own row names it
            if package == "offset_assets/" and len(module.relative_to(folder).parts) > 1:
                continue  # a package of its own, with its own row
            if not _mentions(text, module, folder):
                missing.append(str(module.relative_to(ROOT)))
    assert rows, "docs/internals.md has no module map"
    assert missing == []


def test_every_module_the_internals_map_names_is_in_the_tree():
    gone = []
    for package, text in _map_rows().items():
        # The CLI and the reference project share a row: a name is checked under both.
        folders = [ROOT / p for p, t in _map_rows().items() if t == text]
        for name in re.findall(r"`([\w/]+\.py)`", text):
            if not any(list(folder.rglob(name)) or (ROOT / name).exists() for folder in folders):
                gone.append(f"{package}{name}")
    assert gone == []


def test_every_package_has_a_row_in_the_internals_map():
    rows = _map_rows()
    packages = [f"offset_assets/{p.name}/" for p in sorted((ROOT / "offset_assets").iterdir())
                if (p / "__init__.py").exists()]
    assert [package for package in packages if package not in rows] == []


def test_every_migration_revision_is_in_the_internals_list_of_migrations():
    """The list under 'Migrations' names each revision file's number, up to the newest."""
    text = (ROOT / "docs" / "internals.md").read_text()
    listed = text[text.index("- Migrations (`control_plane/migrations/versions/`)"):]
    listed = listed[:listed.index("never edit a released one")]
    revisions = sorted(p.name[:4] for p in (ROOT / "offset_assets" / "control_plane" / "migrations" / "versions")
                       .glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert revisions and [r for r in revisions if r not in listed] == []
