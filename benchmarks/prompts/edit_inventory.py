"""Inventory bookkeeping for a small shop: items, stock moves and a few reports.

This module is the fixed file benchmarks/prediction.py asks the model to edit (it is data, not part of specchat).
"""

from __future__ import annotations

from dataclasses import dataclass, field

REORDER_LEVEL = 5
MAX_STOCK = 200
VAT_RATE = 0.2
CURRENCY = "EUR"


@dataclass
class Item:
    sku: str
    name: str
    price: float
    stock: int = 0
    tags: list[str] = field(default_factory=list)

    def value(self) -> float:
        return self.price * self.stock

    def needs_reorder(self) -> bool:
        return self.stock <= REORDER_LEVEL

    def restock(self, count: int) -> None:
        if count <= 0:
            raise ValueError("count must be positive")
        self.stock = min(MAX_STOCK, self.stock + count)

    def sell(self, count: int) -> float:
        if count > self.stock:
            raise ValueError(f"only {self.stock} of {self.sku} left")
        self.stock -= count
        return count * self.price


@dataclass
class Move:
    sku: str
    count: int
    reason: str


class Inventory:
    def __init__(self) -> None:
        self.items: dict[str, Item] = {}
        self.moves: list[Move] = []

    def add(self, item: Item) -> None:
        if item.sku in self.items:
            raise KeyError(f"{item.sku} is already listed")
        self.items[item.sku] = item

    def remove(self, sku: str) -> Item:
        item = self.items.pop(sku)
        self.moves.append(Move(sku, -item.stock, "removed"))
        return item

    def find(self, name: str) -> list[Item]:
        needle = name.lower()
        return [item for item in self.items.values() if needle in item.name.lower()]

    def restock(self, sku: str, count: int) -> None:
        self.items[sku].restock(count)
        self.moves.append(Move(sku, count, "restock"))

    def sell(self, sku: str, count: int) -> float:
        total = self.items[sku].sell(count)
        self.moves.append(Move(sku, -count, "sale"))
        return total

    def total_value(self) -> float:
        return sum(item.value() for item in self.items.values())

    def low_stock(self) -> list[Item]:
        return [item for item in self.items.values() if item.needs_reorder()]

    def tagged(self, tag: str) -> list[Item]:
        return [item for item in self.items.values() if tag in item.tags]


def price_with_vat(price: float) -> float:
    return round(price * (1 + VAT_RATE), 2)


def format_price(price: float) -> str:
    return f"{price:.2f} {CURRENCY}"


def reorder_list(inventory: Inventory) -> list[str]:
    lines = []
    for item in inventory.low_stock():
        wanted = MAX_STOCK - item.stock
        lines.append(f"{item.sku}: order {wanted} of {item.name}")
    return lines


def stock_report(inventory: Inventory) -> str:
    rows = ["sku       name                 stock      value"]
    for item in sorted(inventory.items.values(), key=lambda i: i.sku):
        rows.append(f"{item.sku:<10}{item.name:<20}{item.stock:>6}{format_price(item.value()):>14}")
    rows.append(f"total value: {format_price(inventory.total_value())}")
    return "\n".join(rows)


def sales_total(inventory: Inventory) -> int:
    return -sum(move.count for move in inventory.moves if move.reason == "sale")


def moves_for(inventory: Inventory, sku: str) -> list[Move]:
    return [move for move in inventory.moves if move.sku == sku]


def busiest_item(inventory: Inventory) -> str | None:
    counts: dict[str, int] = {}
    for move in inventory.moves:
        if move.reason == "sale":
            counts[move.sku] = counts.get(move.sku, 0) - move.count
    if not counts:
        return None
    return max(counts, key=lambda sku: counts[sku])


def apply_discount(inventory: Inventory, tag: str, percent: float) -> int:
    changed = 0
    for item in inventory.tagged(tag):
        item.price = round(item.price * (1 - percent / 100), 2)
        changed += 1
    return changed


def parse_line(line: str) -> Item:
    sku, name, price, stock = (part.strip() for part in line.split(","))
    return Item(sku, name, float(price), int(stock))


def load_csv(text: str) -> Inventory:
    inventory = Inventory()
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            inventory.add(parse_line(line))
    return inventory


def dump_csv(inventory: Inventory) -> str:
    lines = ["# sku, name, price, stock"]
    for item in inventory.items.values():
        lines.append(f"{item.sku}, {item.name}, {item.price}, {item.stock}")
    return "\n".join(lines) + "\n"


def check(inventory: Inventory) -> list[str]:
    problems = []
    for item in inventory.items.values():
        if item.price < 0:
            problems.append(f"{item.sku}: negative price")
        if item.stock < 0:
            problems.append(f"{item.sku}: negative stock")
        if item.stock > MAX_STOCK:
            problems.append(f"{item.sku}: over the stock limit")
    return problems


def demo() -> str:
    inventory = load_csv("A1, tea, 3.5, 40\nB2, coffee, 7.25, 3\nC3, sugar, 1.2, 100\n")
    inventory.sell("A1", 5)
    inventory.restock("B2", 20)
    return stock_report(inventory)


if __name__ == "__main__":
    print(demo())
