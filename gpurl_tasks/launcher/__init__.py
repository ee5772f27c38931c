"""launcher: the file the pin goes into, read and edited by `ast` spans, never re-rendered.

- `source`: the span primitives (a module parsed, a node's span, one assignment found, a
  string literal in the quotes it replaces), shared by the variable pin (release/pin.py);
- `table`: the typed image table (`GPU_RL_IMAGES[(arch, variant)] = Image(digest=..., ...)`):
  its entries read, pinned in place, and the commit an entry records.

Imports the basics only (config, errors); `rebuild` reads the pinned commit through it and
`release` writes the pin.
"""
