"""``/models/{name}/items``: an action-feature model's catalog (issue 54), admin key.

Items are registered once, hashed once and kept in the model's event log
(:mod:`service.runtime.items`), so every replica serves the same catalog; a write is answered once
this replica applied it, with the model version (log position) that holds it: any replica whose
version is at least that serves it (a removal: never serves the item again).

- ``PUT /models/{name}/items/{id}``: register or replace one item;
- ``POST /models/{name}/items``: register or replace many, a JSON array of items or JSON lines (one
  item per line, ``Content-Type: application/x-ndjson``); all or nothing as to their content (the
  first bad item is named, 422, and nothing is registered); up to ``CLICKBOOST_MAX_MODEL_BYTES`` of
  body with the admin key (:class:`service.api.errors.BodyLimit`);
- ``DELETE /models/{name}/items/{id}``; ``GET`` one item, and a page of them in catalog order.

An unknown model or item is 404, a model with fixed labels 422, a catalog that would not fit the
memory budget 422 naming both sizes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from service.actions import MAX_ACTION_ID
from service.api.auth import require_admin
from service.api.models import NamePath
from service.api.predict import RuntimeDep
from service.api.schemas import FeatureName, NamedValue, error_responses
from service.catalog import Catalog, CatalogError, describe
from service.runtime import ModelRuntime, Runtime

router = APIRouter(
    prefix="/models",
    dependencies=[Depends(require_admin)],
    tags=["items"],
    responses=error_responses(401, 403),
)
NAMED = error_responses(404, 421, 422, 503)
#: Media types of JSON lines (one item per line) that the bulk call takes, beside a JSON array.
LINES_MEDIA = ("application/x-ndjson", "application/jsonl", "application/json-seq")
#: Most items of a page of ``GET /models/{name}/items``.
MAX_PAGE = 1000

ItemPath = Annotated[
    str, Path(min_length=1, max_length=MAX_ACTION_ID, description="The item's id (as a candidate's id).")
]


class ItemBody(BaseModel):
    """Body of ``PUT /models/{name}/items/{id}``."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={"examples": [{"features": {"brand": "acme", "price": 9.5, "sale": True}}]},
    )

    features: dict[FeatureName, NamedValue] = Field(
        default_factory=dict, description="The item's named features {name: number | string | bool}."
    )
    active: bool = Field(True, description="Whether predicts may choose it.")
    expires_at: float | None = Field(
        None, description="Unix seconds after which it is no longer served (none: never)."
    )


class ItemsWritten(BaseModel):
    """What a write to a catalog did."""

    model: str
    version: int = Field(description="The model version (log position) that holds the change.")
    written: int = Field(description="Items registered, replaced or removed by this call.")
    items: int = Field(description="Items in the catalog now (active or not).")


class ItemInfo(BaseModel):
    """What the catalog keeps of an item: the numbers among its features are kept hashed only."""

    id: str
    active: bool
    expires_at: float | None = Field(description="Unix seconds; none: never expires.")
    expired: bool = Field(description="Past expires_at: not served.")
    categorical: dict[str, str | bool] = Field(description="Its string and boolean features.")
    entries: int = Field(description="Hashed entries of its features.")


class ItemPage(BaseModel):
    """A page of a catalog, in catalog order (registration order; a replaced item keeps its place)."""

    model: str
    version: int
    total: int = Field(description="Items in the catalog (active or not).")
    offset: int
    items: list[ItemInfo]
    next_offset: int | None = Field(description="The offset of the next page; none after the last.")


def _catalog(m: ModelRuntime) -> Catalog:
    assert m.catalog is not None  # Runtime.items.model refused a label model
    return m.catalog


def _info(catalog: Catalog, slot: int, now: float) -> ItemInfo:
    item = describe(catalog, slot)
    expires = item["expires_at"]
    return ItemInfo(**item, expired=expires is not None and expires <= now)


def _written(m: ModelRuntime, position: int, written: int) -> ItemsWritten:
    return ItemsWritten(model=m.name, version=position, written=written, items=len(_catalog(m)))


async def _put(runtime: Runtime, name: str, items: list[Any]) -> ItemsWritten:
    """Register ``items``; a :class:`CatalogError` is 422 naming the item."""
    try:
        m, position = await runtime.items.put(name, items)
    except CatalogError as exc:
        raise HTTPException(422, str(exc)) from None
    return _written(m, position, len(items))


@router.put(
    "/{name}/items/{item_id}",
    response_model=ItemsWritten,
    responses=error_responses(400, 404, 413, 421, 422, 503),
    summary="Register or replace an item of the catalog",
)
async def put_item(name: NamePath, item_id: ItemPath, body: ItemBody, runtime: RuntimeDep) -> ItemsWritten:
    """Register the item (hashed once, kept in the store: every replica serves it once it applied
    ``version``), or replace it, keeping its place in the catalog."""
    item = {"id": item_id, **body.model_dump()}
    return await _put(runtime, name, [item])


def _parse(body: bytes, lines: bool) -> list[Any]:
    """The items of a bulk body: a JSON array, or with ``lines`` one JSON object per non-empty line;
    :class:`HTTPException` 400 naming where it is not JSON, 422 when it is not a list of objects."""

    def refuse(token: str) -> Any:
        raise ValueError(f"{token} is not a number")

    try:
        if lines:
            items = [json.loads(line, parse_constant=refuse) for line in body.splitlines() if line.strip()]
        else:
            items = json.loads(body, parse_constant=refuse)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        where = "a line of the body" if lines else "the body"
        raise HTTPException(400, f"malformed JSON in {where}: {exc}") from None
    if not isinstance(items, list):
        raise HTTPException(
            422, "body: a JSON array of items {id, features, active?, expires_at?} is required"
        )
    return items


@router.post(
    "/{name}/items",
    response_model=ItemsWritten,
    responses=error_responses(400, 404, 413, 415, 421, 422, 503),
    summary="Register or replace many items",
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "Items {id, features, active?, expires_at?}: a JSON array, or JSON lines "
            "(one item per line) sent with Content-Type application/x-ndjson (or application/jsonl). "
            "Up to CLICKBOOST_MAX_MODEL_BYTES with the admin key.",
            "content": {
                "application/json": {
                    "schema": {"type": "array", "items": {"type": "object"}},
                    "example": [
                        {"id": "sku-1", "features": {"brand": "acme", "price": 9.5}},
                        {"id": "sku-2", "features": {"brand": "zeta", "price": 12.0}, "active": False},
                    ],
                },
            },
        }
    },
)
async def put_items(name: NamePath, request: Request, runtime: RuntimeDep) -> ItemsWritten:
    """Register or replace every item of the body in order, as a bulk: 100,000 items in one call
    (`bench catalog-http` times it). Every item is checked and hashed before anything is registered;
    the first that does not fit is named (422, ``items.{i}``), and an id given twice is refused."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    lines = media in LINES_MEDIA
    if not lines and media != "application/json":
        raise HTTPException(
            415,
            f"the body must be a JSON array (Content-Type: application/json) or JSON lines "
            f"({', '.join(LINES_MEDIA)}); got {media or 'none'}",
        )
    body = await request.body()
    if not body.strip():
        raise HTTPException(400, "empty body: expected a JSON array of items or JSON lines")
    items = await asyncio.to_thread(_parse, body, lines)  # megabytes of JSON: off the event loop
    return await _put(runtime, name, items)


@router.delete(
    "/{name}/items/{item_id}",
    response_model=ItemsWritten,
    responses=NAMED,
    summary="Remove an item from the catalog",
)
async def delete_item(name: NamePath, item_id: ItemPath, runtime: RuntimeDep) -> ItemsWritten:
    """Remove the item: no replica serves it once it applied ``version``."""
    m, catalog = await runtime.items.model(name)
    if item_id not in catalog:
        raise HTTPException(404, f"item {item_id!r} is not in the catalog of model {name!r}")
    try:
        m, position = await runtime.items.remove(name, item_id)
    except CatalogError as exc:  # removed by another call meanwhile
        raise HTTPException(404, str(exc)) from None
    return _written(m, position, 1)


@router.get("/{name}/items/{item_id}", response_model=ItemInfo, responses=NAMED, summary="An item")
async def get_item(name: NamePath, item_id: ItemPath, runtime: RuntimeDep) -> ItemInfo:
    """What the catalog keeps of the item (as this replica has applied the log)."""
    _, catalog = await runtime.items.model(name)
    slot = catalog.slot_of(item_id)
    if slot is None:
        raise HTTPException(404, f"item {item_id!r} is not in the catalog of model {name!r}")
    return _info(catalog, slot, runtime.clock())


@router.get("/{name}/items", response_model=ItemPage, responses=NAMED, summary="A page of the catalog")
async def list_items(
    name: NamePath,
    runtime: RuntimeDep,
    offset: Annotated[int, Query(ge=0, description="Items to skip, in catalog order.")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Most items to return.")] = 100,
) -> ItemPage:
    """Items ``offset .. offset + limit`` of the catalog in catalog order (inactive and expired ones
    included, flagged)."""
    m, catalog = await runtime.items.model(name)
    live = catalog.live_slots()
    now = runtime.clock()
    page = [_info(catalog, int(s), now) for s in live[offset : offset + limit]]
    end = offset + len(page)
    return ItemPage(
        model=m.name,
        version=m.position,
        total=int(live.size),
        offset=offset,
        items=page,
        next_offset=end if end < live.size else None,
    )
