"""Prototype renderers for world v2 (monkeypatched into data_pipeline.synthetic)."""
import random
from PIL import Image, ImageDraw
from data_pipeline import synthetic as syn

PALETTES = {
    "white": {"white": (250, 232, 205), "gray": (196, 140, 96), "black": (80, 44, 24)},   # warm
    "gray": {"white": (212, 230, 250), "gray": (100, 146, 196), "black": (24, 46, 84)},   # cool
    "black": {"white": (238, 238, 238), "gray": (150, 150, 150), "black": (40, 40, 40)},  # neutral
}
OPTS = {"bg": "attr", "smin": 0.34, "smax": 0.70, "hatch_phase": True, "tints": None}

def render(spec, size=64, seed=0, pose=False):
    rng = random.Random(seed)
    o = OPTS
    if o["bg"] == "nuisance":
        bgname = rng.choice(list(syn.BACKGROUNDS))
    else:
        bgname = spec.background
    bgs = o["tints"] or syn.BACKGROUNDS
    bg = bgs[bgname]
    if o["bg"] == "palette":
        shade = rng.choice(["white", "gray", "black"])
        bg = PALETTES[spec.background][shade]
        bgname = shade
    image = Image.new("RGB", (size, size), bg)
    draw = ImageDraw.Draw(image)
    ink = {"white": (80, 80, 80), "gray": (225, 225, 225), "black": (140, 140, 140)}.get(bgname, (80, 80, 80))
    if o["tints"]:
        ink = (90, 90, 90)
    if spec.texture == "grain":
        for _ in range(size * size // 40):
            x, y = rng.randrange(size), rng.randrange(size)
            draw.rectangle((x, y, x + 1, y + 1), fill=ink)
    elif spec.texture == "hatch":
        phase = rng.randrange(8) if o["hatch_phase"] else 0
        for offset in range(-size + phase, size, 8):
            draw.line([(offset, size), (offset + size, 0)], fill=ink, width=2)
    pip = max(2, size // 20)
    top_free = size - pip * 2 - 3  # area above the pips
    side = int(round(rng.uniform(o["smin"], o["smax"]) * size))
    x0 = rng.randint(1, size - side - 1)
    y0 = rng.randint(1, max(1, top_free - side))
    box = (x0, y0, x0 + side, y0 + side)
    outline_colour = (0, 0, 0) if bgname != "black" else (255, 255, 255)
    syn._draw_shape(draw, spec.shape, box, fill=syn.COLOURS[spec.colour],
                    outline=outline_colour if spec.outline else None, width=spec.outline or 1)
    cx, cy = (box[0] + box[2]) // 2, (box[1] + box[3]) // 2
    if spec.shape == "triangle":
        cy = box[1] + 2 * side // 3
    r = max(2, side // 10)
    mark = (255, 255, 255) if spec.colour != "yellow" else (30, 30, 30)
    if spec.marking == "dots":
        for dx in (-r * 2, r * 2):
            draw.ellipse((cx + dx - r, cy - r, cx + dx + r, cy + r), fill=mark)
    elif spec.marking == "stripes":
        for dy in (-r * 2, 0, r * 2):
            draw.line([(cx - 3 * r, cy + dy), (cx + 3 * r, cy + dy)], fill=mark, width=max(1, r // 2))
    elif spec.marking == "cross":
        draw.line([(cx - 2 * r, cy - 2 * r), (cx + 2 * r, cy + 2 * r)], fill=mark, width=max(2, r))
        draw.line([(cx - 2 * r, cy + 2 * r), (cx + 2 * r, cy - 2 * r)], fill=mark, width=max(2, r))
    count = spec.step + 1
    span = count * pip * 2
    x = (size - span) // 2
    y = size - pip * 2 - 1
    for k in range(count):
        draw.rectangle((x + k * 2 * pip, y, x + k * 2 * pip + pip, y + pip), fill=outline_colour)
    return image
