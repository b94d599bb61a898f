"""How the components' YAML becomes Python, and how its mistakes are said: in one line
naming the file, the line and the key.

Dagster resolves a component's attributes (a misspelt key is refused there, `parsed`
saying it in one line) and then calls its `build_defs`, where what only Python can check
is checked: a column type Spark does not know, an import path that does not import, a
declaration the Python form refuses. Such a mistake raises `ComponentDeclarationError`,
whose message names the YAML file, the line and the key (`declared_at`), the way Dagster
names the key its resolution refuses:

    .../defs/orders/defs.yaml:17 - attributes.target.columns.amount_cents: 'lnog' is not a Spark type ...

`load_defs_folder` is what a project's `definitions.py` loads its `defs/` folder with:
Dagster's `load_from_defs_folder`, the definitions checked as a whole
(`validate_definitions`), and a component's mistake raised as that one line alone, not
inside Dagster's tree of components and the traces of each exception it wraps (what
`dg check defs` and `dagster dev` print).
"""

# No `from __future__ import annotations`: Dagster resolves resolver types at class
# creation, so they must not be strings.

import importlib
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
from dagster.components.resolved.errors import ResolutionException
from pydantic import TypeAdapter, ValidationError

from offset_assets.dagster_adapter.incremental.definition_checks import validate_definitions
from offset_assets.errors import OffsetAssetsError

M = TypeVar("M")


class ComponentDeclarationError(dg.DagsterInvalidDefinitionError):
    """A component's YAML declares something its Python form refuses; the message is one
    line naming the file, the line and the key (`declared_at`)."""


class ColumnTypeError(ValueError):
    """A column's declared type is not a Spark type; `column` names the column."""

    def __init__(self, column: str, declared: object) -> None:
        super().__init__(
            f"{declared!r} is not a Spark type (`<type> [not null]`: long, string, double, boolean, "
            "date, timestamp, decimal(10,2), ...)"
        )
        self.column = column


# -- where a mistake is ----------------------------------------------------------------------


def where(context: dg.ComponentLoadContext, key: Sequence[str] = ()) -> str:
    """`<defs.yaml>:<line> - attributes.<key>` of the component being built: the line of
    the deepest part of `key` its YAML holds; the component's folder when it was not
    declared in YAML."""
    decl = getattr(context, "component_decl", None)
    node = getattr(getattr(decl, "source_tree", None), "source_position_tree", None)
    path = ["attributes", *key]
    if node is None:
        return f"{context.path} - {'.'.join(path)}"
    for part in path:
        child = node.children.get(part)
        if child is None:
            break
        node = child
    return f"{node.position.filename}:{node.position.start.line} - {'.'.join(path)}"


@contextmanager
def declared_at(context: dg.ComponentLoadContext, key: Sequence[str] = ()) -> Iterator[None]:
    """What the block refuses (a definition error, a value error, an offset-assets error:
    what the Python form raises for a bad declaration) as a `ComponentDeclarationError`
    naming the file and `key` (a column's own key for a `ColumnTypeError`); one raised
    inside already names its key."""
    try:
        yield
    except ComponentDeclarationError:
        raise
    except ColumnTypeError as exc:
        raise ComponentDeclarationError(f"{where(context, [*key, 'columns', exc.column])}: {exc}") from exc
    except (dg.DagsterInvalidDefinitionError, OffsetAssetsError, ValueError) as exc:
        raise ComponentDeclarationError(f"{where(context, key)}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return "; ".join(lines) if lines else type(exc).__name__


class DeclaredInYaml:
    """A component (this class first among its bases) whose attributes Dagster resolved
    and its model then refused (a value outside a field's type: `on_malformed: skip`)
    says so in one line per key, naming the file and the key, as `declared_at` does."""

    @classmethod
    def load(cls, attributes: Any, context: dg.ComponentLoadContext) -> Any:
        try:
            return super().load(attributes, context)  # type: ignore[misc]
        except ValidationError as exc:
            said = "; ".join(
                f"{where(context, [str(part) for part in error['loc']])}: {error['msg']}" for error in exc.errors()
            )
            raise ComponentDeclarationError(said) from None


# -- nested attributes -----------------------------------------------------------------------


def parsed(model: Any, field: str) -> dg.Resolver:
    """Resolve a nested attribute (`source:`, `planner:`, `outs:`, ...) by rendering its
    templates and validating it as `model` (a `dg.Model`, or a type of them such as
    `dict[str, OutModel]`), whose mistakes are said in one line naming the key
    (`source.sql_table: unknown key 'id_colum' (keys: url, table, ...)`). Dagster's own
    resolution would accept a template string for every nested object, and so report a
    misspelt key among the failures of each alternative."""
    adapter = TypeAdapter(model)

    def resolve(context: dg.ResolutionContext, value: Any) -> Any:
        if value is None:
            return None
        try:
            return adapter.validate_python(context.resolve_value(value))
        except ValidationError as exc:
            # An unknown key first: a misspelt key is also the required one said missing.
            errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
            raise ValueError("; ".join(_error_text(model, field, error) for error in errors)) from None

    return dg.Resolver(resolve, model_field_type=dict | None, description=inspect.getdoc(_first_model(model)))


def _error_text(model: Any, field: str, error: Mapping[str, Any]) -> str:
    path = [str(part) for part in error["loc"]]
    at = ".".join([field, *path[:-1]]) if path else field
    if error["type"] == "extra_forbidden":
        keys = ", ".join(_model_at(model, path[:-1]).model_fields)
        return f"{at}: unknown key {path[-1]!r} (keys: {keys})"
    if error["type"] == "missing":
        return f"{at}: missing key {path[-1]!r}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{'.'.join([field, *path])}: {message}"


def _model_at(model: Any, path: Sequence[str]) -> type[dg.Model]:
    """The nested model `path` leads to from `model` (Optional fields unwrapped; a dict's
    key steps into its values' model)."""
    current = _first_model(model)
    in_dict = typing.get_origin(model) is dict
    for name in path:
        if in_dict:  # the dict's key: its value is the model already
            in_dict = False
            continue
        annotation = current.model_fields[name].annotation
        in_dict = typing.get_origin(annotation) is dict
        current = _first_model(annotation)
    return current


def _first_model(annotation: Any) -> type[dg.Model]:
    """The `dg.Model` a type holds: itself, an Optional's, a dict's values'."""
    if isinstance(annotation, type) and issubclass(annotation, dg.Model):
        return annotation
    return next(
        _first_model(arg)
        for arg in typing.get_args(annotation)
        if isinstance(arg, type) and issubclass(arg, dg.Model) or typing.get_args(arg)
    )


# -- import paths ----------------------------------------------------------------------------


def import_object(context: dg.ComponentLoadContext, path: str, key: Sequence[str]) -> Any:
    """The object at `module.attribute`; a path starting with `.` is relative to the
    component's folder in the defs module (as `type: .MyComponent` is). `key`: where the
    path is declared, named when it does not import."""
    module_name, _, attribute = context.normalize_component_type_str(path).rpartition(".")
    if not module_name:
        raise ComponentDeclarationError(f"{where(context, key)}: {path!r} is not an import path (module.attribute)")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ComponentDeclarationError(f"{where(context, key)}: cannot import {path!r}: {exc}") from exc


def import_function(context: dg.ComponentLoadContext, path: str, key: Sequence[str]) -> Callable[..., Any]:
    function = import_object(context, path, key)
    if not callable(function):
        raise ComponentDeclarationError(f"{where(context, key)}: {path!r} is not a function")
    return function


# -- a project's definitions -----------------------------------------------------------------


def load_defs_folder(path_within_project: Path) -> dg.Definitions:
    """The definitions of a components project: `dg.load_from_defs_folder`, checked as a
    whole by `validate_definitions`. A component's mistake (`ComponentDeclarationError`,
    or a key Dagster's resolution refused) is raised as one line naming the file and the
    key, without the tree of components and the traces Dagster wraps it in; any other
    error is raised as Dagster raised it."""
    try:
        defs = dg.load_from_defs_folder(path_within_project=path_within_project)
    except Exception as exc:  # only a component's own mistake is said otherwise
        said = _declaration_mistake(exc)
        if said is None:
            raise
        raise ComponentDeclarationError(said) from None
    return validate_definitions(defs)


def _declaration_mistake(exc: BaseException) -> str | None:
    """The one line of a component's mistake found in `exc`'s chain of causes, or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ComponentDeclarationError):
            return str(seen)
        if isinstance(seen, ResolutionException):
            return _resolution_line(str(seen))
        seen = seen.__cause__
    return None


def _resolution_line(message: str) -> str:
    """Dagster's report of a key it refused (`<file>:<line> - attributes.<key>`, the YAML
    around it, `^ <error>`) in one line: the place, then the error."""
    lines = message.splitlines()
    marked = [line.split("^", 1)[1].strip() for line in lines if "|" in line and "^" in line.split("|", 1)[1]]
    if not (lines and marked):
        return " ".join(line.strip() for line in lines)
    return f"{lines[0].strip()}: {marked[0].removeprefix('ValueError: ')}"
