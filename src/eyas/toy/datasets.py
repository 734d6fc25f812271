"""Deterministic synthetic source datasets B1..B8, each in its *original* source format.

They mirror a real multi-dataset drafter run (function calling, chat, math, code, multi-turn,
reasoning) and exist so the converters, the renderer, generation and the drafter are all
exercised on data shaped like the real thing. Answers are deterministic functions of the
question, so a small model can learn them and acceptance length means something.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CITIES = [
    "Paris",
    "Tokyo",
    "Berlin",
    "Lima",
    "Cairo",
    "Oslo",
    "Madrid",
    "Toronto",
    "Sydney",
    "Denver",
    "Boston",
    "Seattle",
    "Dublin",
    "Rome",
    "Vienna",
    "Prague",
    "Austin",
    "Delhi",
]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "CAD", "AUD", "INR"]
EVENTS = [
    "Doctor's appointment",
    "Mom's birthday",
    "Team meeting",
    "Dentist visit",
    "Sam's graduation",
    "Project review",
    "Yoga class",
    "Lunch with Ana",
]
DATES = ["2024-05-01", "2024-06-12", "2024-07-04", "2024-08-20", "2024-09-15", "2024-10-31"]
INGREDIENTS = ["chicken", "tofu", "rice", "pasta", "salmon", "lentils", "spinach", "beef"]
SYMBOLS = ["AAPL", "MSFT", "NVDA", "AMZN", "TSLA", "GOOG", "META", "IBM"]
LANGUAGES = ["French", "Spanish", "German", "Japanese", "Italian"]
PHRASES = ["good morning", "thank you", "where is the station", "see you soon", "happy birthday"]
PEOPLE = ["alice@example.com", "bob@example.com", "carol@example.com", "dan@example.com"]
SUBJECTS = ["Weekly report", "Dinner plans", "Invoice", "Travel update"]
ANIMALS = {
    "cat": "Cats sleep for about 13 to 16 hours a day.",
    "dog": "Dogs can understand around 250 words and gestures.",
    "owl": "Owls can turn their heads about 270 degrees.",
    "whale": "Blue whales are the largest animals that ever lived.",
    "bee": "Bees communicate the location of flowers with a waggle dance.",
    "octopus": "An octopus has three hearts and blue blood.",
    "penguin": "Penguins cannot fly, but they swim very fast.",
    "horse": "Horses can sleep both lying down and standing up.",
}
TOPICS = {
    "photosynthesis": "Photosynthesis is how plants turn light, water and carbon dioxide into sugar and oxygen.",
    "gravity": "Gravity is the force that pulls objects with mass toward each other.",
    "volcanoes": "Volcanoes form where molten rock from inside the Earth reaches the surface.",
    "the moon": "The Moon orbits the Earth about once every 27 days.",
    "rainbows": "Rainbows appear when sunlight is bent and split into colors by raindrops.",
    "tides": "Tides are caused mainly by the pull of the Moon on the oceans.",
}


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


TOOLS = {
    "get_weather": _tool(
        "get_weather",
        "Get the current weather for a location",
        {
            "location": {"type": "string", "description": "The city name"},
            "unit": {
                "type": "string",
                "enum": ["celsius", "fahrenheit"],
                "description": "Temperature unit",
            },
        },
        ["location"],
    ),
    "convert_currency": _tool(
        "convert_currency",
        "Convert an amount from one currency to another",
        {
            "amount": {"type": "number", "description": "The amount to convert"},
            "from_currency": {"type": "string", "description": "Currency code to convert from"},
            "to_currency": {"type": "string", "description": "Currency code to convert to"},
        },
        ["amount", "from_currency", "to_currency"],
    ),
    "create_event": _tool(
        "create_event",
        "Create a calendar event",
        {
            "title": {"type": "string", "description": "The event title"},
            "date": {"type": "string", "description": "The date, YYYY-MM-DD"},
        },
        ["title", "date"],
    ),
    "search_recipes": _tool(
        "search_recipes",
        "Search recipes by ingredient",
        {
            "ingredient": {"type": "string", "description": "The main ingredient"},
            "max_results": {"type": "integer", "description": "How many recipes", "minimum": 1},
        },
        ["ingredient"],
    ),
    "get_stock_price": _tool(
        "get_stock_price",
        "Get the latest stock price",
        {"symbol": {"type": "string", "description": "The ticker symbol"}},
        ["symbol"],
    ),
    "translate_text": _tool(
        "translate_text",
        "Translate text into another language",
        {
            "text": {"type": "string", "description": "The text to translate"},
            "target_language": {"type": "string", "description": "The language to translate into"},
        },
        ["text", "target_language"],
    ),
    "send_email": _tool(
        "send_email",
        "Send an email",
        {
            "recipient": {"type": "string", "description": "The email address"},
            "subject": {"type": "string", "description": "The subject line"},
        },
        ["recipient", "subject"],
    ),
}


def _task(rng: random.Random, name: str) -> tuple[str, dict, dict, str]:
    """(user query, arguments, tool result, final answer) for one call of tool `name`."""
    if name == "get_weather":
        city = rng.choice(CITIES)
        temp = 10 + sum(map(ord, city)) % 20
        q = rng.choice(
            [
                "What's the weather like in {c}?",
                "How is the weather in {c} today?",
                "Tell me the weather in {c}.",
            ]
        ).format(c=city)
        return (
            q,
            {"location": city},
            {"temperature": temp, "condition": "sunny"},
            f"It is sunny in {city} with a temperature of {temp} degrees.",
        )
    if name == "convert_currency":
        amount = rng.choice([10, 25, 50, 100, 250, 500])
        a, b = rng.sample(CURRENCIES, 2)
        q = f"Please convert {amount} {a} to {b}."
        value = round(amount * (1 + (ord(a[0]) - ord(b[0])) / 50), 2)
        return (
            q,
            {"amount": amount, "from_currency": a, "to_currency": b},
            {"converted_amount": value},
            f"{amount} {a} is about {value} {b}.",
        )
    if name == "create_event":
        title, date = rng.choice(EVENTS), rng.choice(DATES)
        q = f"Add '{title}' to my calendar on {date}."
        return (
            q,
            {"title": title, "date": date},
            {"status": "created"},
            f"Done. '{title}' is on your calendar for {date}.",
        )
    if name == "search_recipes":
        ing = rng.choice(INGREDIENTS)
        q = f"Find me a recipe with {ing}."
        return (
            q,
            {"ingredient": ing},
            {"recipes": [f"{ing} stir fry", f"baked {ing}"]},
            f"Here are two ideas: {ing} stir fry and baked {ing}.",
        )
    if name == "get_stock_price":
        sym = rng.choice(SYMBOLS)
        price = 100 + sum(map(ord, sym)) % 300
        return (
            f"What is the stock price of {sym}?",
            {"symbol": sym},
            {"price": price},
            f"{sym} is trading at {price} dollars.",
        )
    if name == "translate_text":
        text, lang = rng.choice(PHRASES), rng.choice(LANGUAGES)
        return (
            f"Translate '{text}' into {lang}.",
            {"text": text, "target_language": lang},
            {"translation": f"[{lang}] {text}"},
            f"In {lang}, '{text}' is: [{lang}] {text}.",
        )
    person, subject = rng.choice(PEOPLE), rng.choice(SUBJECTS)
    return (
        f"Send an email to {person} with the subject '{subject}'.",
        {"recipient": person, "subject": subject},
        {"status": "sent"},
        f"The email '{subject}' was sent to {person}.",
    )


def _pick_tools(rng: random.Random, used: str) -> list[str]:
    others = [t for t in TOOLS if t != used]
    names = [used, *rng.sample(others, rng.randint(0, 2))]
    rng.shuffle(names)
    return names


def glaive_row(rng: random.Random) -> dict:
    """B1: glaive-function-calling-v2 text format (docs/formats.md)."""
    if rng.random() < 0.2:
        animal = rng.choice(list(ANIMALS))
        return {
            "system": "SYSTEM: You are a helpful assistant, with no access to external functions.\n\n",
            "chat": f"USER: Tell me a fact about the {animal}.\n\n\nASSISTANT: {ANIMALS[animal]} <|endoftext|>\n\n\n",
        }
    used = rng.choice(list(TOOLS))
    names = _pick_tools(rng, used)
    q, args, result, answer = _task(rng, used)
    functions = "\n\n".join(json.dumps(TOOLS[n], indent=4) for n in names)
    system = (
        "SYSTEM: You are a helpful assistant with access to the following functions. "
        f"Use them if required -\n{functions}\n"
    )
    args_text = json.dumps(args)
    chat = (
        f'USER: {q}\n\n\nASSISTANT: <functioncall> {{"name": "{used}", "arguments": '
        f"'{args_text}'}} <|endoftext|>\n\n\nFUNCTION RESPONSE: {json.dumps(result)}\n\n\n"
        f"ASSISTANT: {answer} <|endoftext|>\n\n\n"
    )
    return {"system": system, "chat": chat}


# The dataset's own func-calling prompt (hermes-function-calling-v1 card), tools as a Python repr.
HERMES_SYSTEM = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools> </tools> XML tags. You may call one or more functions to assist with the user "
    "query. Don't make assumptions about what values to plug into functions.\n<tools>\n"
    "{tools}\n</tools>\nFor each function call return a json object with function name and "
    "arguments within <tool_call> </tool_call> tags with the following schema:\n<tool_call>\n"
    "{{'arguments': <args-dict>, 'name': <function-name>}}\n</tool_call>\n"
)


def hermes_row(rng: random.Random) -> dict:
    """B2: hermes-function-calling-v1 with Python-repr tools and calls (docs/formats.md)."""
    used = rng.choice(list(TOOLS))
    names = _pick_tools(rng, used)
    q, args, result, answer = _task(rng, used)
    tools = repr([{"type": "function", "function": TOOLS[n]} for n in names])
    system = HERMES_SYSTEM.format(tools=tools)
    if rng.random() < 0.3:
        system += "You are also a friendly travel assistant."
    call = {"arguments": args, "name": used}
    call_text = repr(call) if rng.random() < 0.5 else json.dumps(call)
    return {
        "id": f"hermes-{rng.getrandbits(32):08x}",
        "conversations": [
            {"from": "system", "value": system},
            {"from": "human", "value": q},
            {"from": "gpt", "value": f"<tool_call>\n{call_text}\n</tool_call>"},
            {
                "from": "tool",
                "value": "<tool_response>\n"
                + json.dumps({"name": used, "content": result})
                + "\n</tool_response>",
            },
            {"from": "gpt", "value": answer},
        ],
        "category": "toy",
        "subcategory": used,
        "task": "function calling",
    }


_XLAM_TYPES = {"string": "str", "number": "float", "integer": "int"}


def xlam_row(rng: random.Random) -> dict:
    """B3: xLAM/APIGen with JSON-string fields and Python-ish types (docs/formats.md)."""
    used = rng.choice(list(TOOLS))
    names = _pick_tools(rng, used)
    tools = []
    for n in names:
        spec = TOOLS[n]
        params = {}
        for pname, p in spec["parameters"]["properties"].items():
            t = _XLAM_TYPES.get(p.get("type", "string"), "str")
            entry = {"description": p.get("description", ""), "type": t}
            if pname not in spec["parameters"]["required"]:
                entry["type"] = f"{t}, optional"
                entry["default"] = ""
            params[pname] = entry
        tools.append({"name": n, "description": spec["description"], "parameters": params})
    q, args, _, _ = _task(rng, used)
    answers = [{"name": used, "arguments": args}]
    if used == "get_weather" and rng.random() < 0.5:  # parallel calls
        other = rng.choice([c for c in CITIES if c != args["location"]])
        q = f"What's the weather in {args['location']} and in {other}?"
        answers.append({"name": used, "arguments": {"location": other}})
    return {
        "id": rng.getrandbits(31),
        "query": q,
        "tools": json.dumps(tools),
        "answers": json.dumps(answers),
    }


def sharegpt_row(rng: random.Random) -> dict:
    """B4: ShareGPT chat (`from`/`value`)."""
    conv = []
    if rng.random() < 0.3:
        conv.append({"from": "system", "value": "You are a cheerful science tutor."})
    roll = rng.random()
    if roll < 0.35:
        animal = rng.choice(list(ANIMALS))
        question, answer = f"Tell me a fact about the {animal}.", ANIMALS[animal]
    elif roll < 0.7:
        n = rng.randint(2, 199)
        parity = "even" if n % 2 == 0 else "odd"
        question = f"Tell me something about the number {n}."
        answer = f"{n} is an {parity} number, and {n} squared is {n * n}."
    else:
        topic = rng.choice(list(TOPICS))
        question, answer = f"Explain {topic} in one sentence.", TOPICS[topic]
    conv += [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]
    return {"id": f"sg-{rng.getrandbits(32):08x}", "conversations": conv}


def ultrachat_row(rng: random.Random) -> dict:
    """B5: UltraChat-200k multi-turn `messages`."""
    topics = rng.sample(list(TOPICS), 2)
    first = f"Explain {topics[0]} in one sentence."
    a, b = sorted(rng.sample(range(1, 100), 2))
    messages = [
        {"role": "user", "content": first},
        {"role": "assistant", "content": TOPICS[topics[0]]},
        {"role": "user", "content": f"And what about {topics[1]}?"},
        {"role": "assistant", "content": TOPICS[topics[1]]},
        {"role": "user", "content": f"Now pick a number between {a} and {b}."},
        {"role": "assistant", "content": f"I pick {(a + b) // 2}, right in the middle."},
    ]
    return {"prompt": first, "prompt_id": f"{rng.getrandbits(64):016x}", "messages": messages}


def math_row(rng: random.Random) -> dict:
    """B6: math with reasoning, OpenAI messages with `reasoning_content`."""
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    op = rng.choice(["+", "-", "*"])
    c = a + b if op == "+" else a - b if op == "-" else a * b
    word = {"+": "add", "-": "subtract", "*": "multiply"}[op]
    return {
        "messages": [
            {"role": "user", "content": f"What is {a} {op} {b}?"},
            {
                "role": "assistant",
                "reasoning_content": f"I need to {word} {a} and {b}. {a} {op} {b} = {c}.",
                "content": f"The answer is {c}.",
            },
        ]
    }


CODE = {
    "square": ("x", "x * x"),
    "double": ("x", "x * 2"),
    "negate": ("x", "-x"),
    "increment": ("x", "x + 1"),
    "is_even": ("n", "n % 2 == 0"),
    "last_item": ("items", "items[-1]"),
    "first_item": ("items", "items[0]"),
    "length": ("items", "len(items)"),
}


def code_row(rng: random.Random) -> dict:
    """B7: code, ShareGPT variant with `role`/`content` keys."""
    name = rng.choice(list(CODE))
    arg, expr = CODE[name]
    if rng.random() < 0.5:
        k = rng.randint(2, 60)
        name, arg, expr = f"scale_by_{k}", "x", f"x * {k}"
    new = rng.choice([arg, "value", "data", "n", "item", "x"])
    expr = re.sub(rf"\b{arg}\b", new, expr)
    arg = new
    q = f"Write a Python function called {name} that takes {arg}."
    answer = f"```python\ndef {name}({arg}):\n    return {expr}\n```"
    return {
        "conversations": [{"role": "user", "content": q}, {"role": "assistant", "content": answer}]
    }


def reasoning_row(rng: random.Random) -> dict:
    """B8: long-form reasoning, OpenAI messages with a multi-step `reasoning_content`."""
    nums = rng.sample(range(1, 40), rng.randint(3, 5))
    steps, total = [], 0
    for n in nums:
        steps.append(f"{total} + {n} = {total + n}.")
        total += n
    reasoning = (
        "Let me add the numbers one at a time. " + " ".join(steps) + f" So the sum is {total}."
    )
    listing = ", ".join(map(str, nums))
    return {
        "messages": [
            {"role": "user", "content": f"What is the sum of {listing}?"},
            {
                "role": "assistant",
                "reasoning_content": reasoning,
                "content": f"The sum is {total}.",
            },
        ]
    }


@dataclass(frozen=True)
class Family:
    name: str
    format: str
    kind: str  # "tool" or "chat"
    make: Callable[[random.Random], dict]


FAMILIES = (
    Family("b1_glaive", "glaive", "tool", glaive_row),
    Family("b2_hermes", "hermes", "tool", hermes_row),
    Family("b3_xlam", "xlam", "tool", xlam_row),
    Family("b4_sharegpt", "sharegpt", "chat", sharegpt_row),
    Family("b5_ultrachat", "ultrachat", "chat", ultrachat_row),
    Family("b6_math", "openai", "chat", math_row),
    Family("b7_code", "sharegpt", "chat", code_row),
    Family("b8_reasoning", "openai", "chat", reasoning_row),
)


def family_rows(family: Family, num_rows: int, seed: int = 0) -> list[dict]:
    rng = random.Random(f"{family.name}:{seed}")
    return [family.make(rng) for _ in range(num_rows)]


def write_datasets(out_dir: str | Path, num_rows: int = 200, seed: int = 0) -> dict[str, Path]:
    """Write each family as `<name>.jsonl` in its source format; returns name -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for fam in FAMILIES:
        path = out / f"{fam.name}.jsonl"
        with path.open("w") as f:
            for row in family_rows(fam, num_rows, seed):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        paths[fam.name] = path
    return paths
