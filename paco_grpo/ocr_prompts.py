"""Prompts for the OCR task: a scene with one short text to render, quoted.

Each prompt is a scene template (``'A storefront sign that says "{text}"'``) filled with a
text made from word lists (``"Golden Harbor Bakery"``, ``"Save The Owls"``, ...). Templates
and words are written here, so the files are ours to ship and a seed regenerates them
exactly. Every text is used once across a generation, so a test split drawn with the training
split never shows a text the policy trained on. The prompts carry no grid layout (``1x1``: the
recipe sets ``layout``), and their texts hold no ``RxC`` pattern a loader would take for one.

The files the OCR recipes read were written by::

    paco-grpo ocr-prompts recipes/data --num_train 1000 --num_test 100 --seed 0

    >>> generate_ocr_prompts(2, seed=0)  # doctest: +SKIP
    ['A neon sign glowing on a brick wall at night that reads "Lucky Lantern"', ...]
"""

from __future__ import annotations

import random
from pathlib import Path

from paco_grpo.rewards.base import positive_int
from paco_grpo.rewards.ocr_text import normalize_text, quoted_text
from paco_reward.errors import InputError

__all__ = ["TEMPLATES", "generate_ocr_prompts", "write_ocr_prompts"]

# Scenes that show one text; "{text}" is where it goes.
TEMPLATES = (
    'A storefront sign that says "{text}"',
    'A neon sign glowing on a brick wall at night that reads "{text}"',
    'A chalkboard menu outside a small cafe with the words "{text}"',
    'A vintage movie poster with the title "{text}" in large letters',
    'A ceramic coffee mug printed with "{text}"',
    'A hand-painted wooden sign in a vegetable garden that reads "{text}"',
    'A white T-shirt with "{text}" printed across the chest',
    'A green street sign at a quiet intersection that says "{text}"',
    'A birthday cake with "{text}" written in blue icing',
    'A hardcover book lying on a desk, its cover titled "{text}"',
    'A billboard beside a desert highway advertising "{text}"',
    'A yellow sticky note on a fridge door that says "{text}"',
    'Colourful graffiti on a concrete wall spelling "{text}"',
    'A banner hanging above a village street that reads "{text}"',
    'A glass jar in a pantry with a paper label reading "{text}"',
    'A small wooden boat with "{text}" painted on its hull',
    'A greeting card on a table with "{text}" in gold letters',
    'A brass plaque beside a museum painting that reads "{text}"',
    'A train station platform sign that says "{text}"',
    'A pizza box with "{text}" printed on the lid',
    'A laptop lid with a round sticker that says "{text}"',
    'A doormat in front of a red door that reads "{text}"',
    'A cereal box on a kitchen counter named "{text}"',
    'A beach towel on the sand with "{text}" printed in bold letters',
    'A bakery window with "{text}" painted in white script',
    'A vinyl record sleeve with the band name "{text}"',
    'A food truck with "{text}" written along its side',
    'A lighthouse keeper holding a lantern next to a sign that says "{text}"',
    'A robot holding a cardboard sign that reads "{text}"',
    'A cat sitting beside a tiny wooden sign that says "{text}"',
    'An old typewriter with a sheet of paper that reads "{text}"',
    'A snowy mountain trail marker that says "{text}"',
    'A bottle of lemonade with a label that reads "{text}"',
    'A movie theatre marquee at dusk showing "{text}"',
    'A sailboat sail with "{text}" stitched across it',
    'A kite flying over a beach with "{text}" written on it',
    'A rustic barn with "{text}" painted above the doors',
    'A skateboard deck with "{text}" printed in bright colours',
    'A blackboard in a classroom with "{text}" written in chalk',
    'A hot air balloon with "{text}" painted in large letters',
)

ADJECTIVES = (
    "Golden",
    "Quiet",
    "Happy",
    "Wild",
    "Lucky",
    "Silver",
    "Midnight",
    "Sunny",
    "Brave",
    "Little",
    "Gentle",
    "Rusty",
    "Velvet",
    "Crimson",
    "Misty",
    "Humble",
    "Electric",
    "Cosmic",
    "Frosty",
    "Honest",
    "Jolly",
    "Lazy",
    "Mighty",
    "Noble",
    "Olive",
    "Purple",
    "Rapid",
    "Secret",
    "Tiny",
    "Urban",
    "Vivid",
    "Windy",
    "Young",
    "Amber",
    "Bright",
    "Clever",
    "Daring",
    "Early",
    "Fancy",
    "Grand",
    "Hidden",
    "Ivory",
    "Lunar",
    "Merry",
    "Northern",
    "Orange",
    "Polar",
    "Royal",
    "Salty",
    "Twisted",
)
NOUNS = (
    "Harbor",
    "Garden",
    "River",
    "Lantern",
    "Owl",
    "Fox",
    "Maple",
    "Comet",
    "Anchor",
    "Meadow",
    "Falcon",
    "Biscuit",
    "Pebble",
    "Canyon",
    "Willow",
    "Otter",
    "Rocket",
    "Teapot",
    "Cactus",
    "Island",
    "Badger",
    "Cloud",
    "Dragon",
    "Ember",
    "Forest",
    "Glacier",
    "Hedgehog",
    "Iris",
    "Jasmine",
    "Kettle",
    "Lemon",
    "Mango",
    "Nutmeg",
    "Orchard",
    "Penguin",
    "Quill",
    "Raven",
    "Saffron",
    "Tiger",
    "Umbrella",
    "Violin",
    "Walrus",
    "Yarn",
    "Zebra",
    "Acorn",
    "Bramble",
    "Compass",
    "Dune",
    "Feather",
    "Harvest",
)
PLACES = (
    "Bakery",
    "Cafe",
    "Books",
    "Market",
    "Studio",
    "Diner",
    "Garage",
    "Records",
    "Gallery",
    "Tavern",
    "Pharmacy",
    "Florist",
    "Library",
    "Bistro",
    "Workshop",
    "Hotel",
    "Bicycles",
    "Pottery",
    "Cinema",
    "Deli",
)
VERBS = ("Save", "Follow", "Find", "Feed", "Visit", "Paint", "Meet", "Chase", "Watch")
ANIMALS = (
    "Owls",
    "Otters",
    "Bees",
    "Whales",
    "Penguins",
    "Foxes",
    "Tigers",
    "Badgers",
    "Ravens",
    "Falcons",
    "Hedgehogs",
    "Walruses",
    "Zebras",
    "Dragons",
)
SLOGANS = (
    "Open Late",
    "Fresh Bread Daily",
    "Welcome Home",
    "Back In Five Minutes",
    "Closed Today",
    "Free Coffee",
    "Hello World",
    "Keep Calm",
    "Good Morning",
    "Sold Out",
    "Grand Opening",
    "No Parking",
    "Best Tacos In Town",
    "Please Knock",
    "Happy Birthday",
    "Stay Curious",
    "Lost And Found",
    "Mind The Gap",
    "Dream Big",
    "Ice Cold Drinks",
)


# Draws in a row that give only texts already used, before the lists count as exhausted.
_MAX_REPEATS = 10_000


def _text(rng: random.Random) -> str:
    """One text to render, in one of nine patterns drawn at random."""
    pattern = rng.randrange(9)
    adjective, noun = rng.choice(ADJECTIVES), rng.choice(NOUNS)
    if pattern == 0:
        return f"{adjective} {noun}"
    if pattern == 1:
        return f"The {adjective} {noun}"
    if pattern == 2:
        return f"{adjective} {noun} {rng.choice(PLACES)}"
    if pattern == 3:
        return f"{noun} {rng.choice(PLACES)}"
    if pattern == 4:
        return f"{rng.choice(VERBS)} The {rng.choice(ANIMALS)}"
    if pattern == 5:
        return " & ".join(rng.sample(NOUNS, 2))
    if pattern == 6:
        return rng.choice(SLOGANS)
    if pattern == 7:
        return f"{noun} No. {rng.randint(1, 99)}"
    return f"{adjective} {noun}".upper()


def generate_ocr_prompts(num_prompts: int, seed: int = 0) -> list[str]:
    """``num_prompts`` OCR prompts, each with a text no other prompt of the list has;
    the same arguments give the same list.

    Raises:
        InputError: ``num_prompts`` is not a positive integer, or more than the word lists
            make distinct texts for (about 60,000).

    Example:
        >>> prompts = generate_ocr_prompts(3, seed=0)
        >>> len(set(prompts)), all('"' in p for p in prompts)
        (3, True)
    """
    positive_int("num_prompts", num_prompts)
    rng = random.Random(seed)
    prompts, texts, repeats = [], set(), 0
    while len(prompts) < num_prompts:
        text = _text(rng)
        if normalize_text(text) in texts:  # a text is used once, as the reward compares it
            repeats += 1
            if repeats > _MAX_REPEATS:
                raise InputError(
                    f"the word lists made only {len(prompts)} distinct texts in a row of "
                    f"{_MAX_REPEATS} draws; ask for fewer than {num_prompts} prompts."
                )
            continue
        repeats = 0
        texts.add(normalize_text(text))
        prompts.append(rng.choice(TEMPLATES).format(text=text))
    return prompts


def write_ocr_prompts(
    output_dir: str | Path, num_train: int = 1000, num_test: int = 100, seed: int = 0
) -> tuple[Path, Path]:
    """Write ``ocr_train.txt`` and ``ocr_test.txt`` (one prompt a line) to ``output_dir``:
    one generation of ``num_train + num_test`` prompts, split, so no test text is trained on.

    Returns:
        The two files' paths, train first.

    Example:
        >>> write_ocr_prompts("recipes/data", 1000, 100, seed=0)   # doctest: +SKIP
        (PosixPath('recipes/data/ocr_train.txt'), PosixPath('recipes/data/ocr_test.txt'))
    """
    positive_int("num_train", num_train)
    positive_int("num_test", num_test)
    prompts = generate_ocr_prompts(num_train + num_test, seed=seed)
    for prompt in prompts:
        quoted_text(prompt)  # every prompt has the target the reward reads
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    train, test = output_dir / "ocr_train.txt", output_dir / "ocr_test.txt"
    train.write_text("\n".join(prompts[:num_train]) + "\n", encoding="utf-8")
    test.write_text("\n".join(prompts[num_train:]) + "\n", encoding="utf-8")
    return train, test
