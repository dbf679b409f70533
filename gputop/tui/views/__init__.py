"""Pure functions from Frames to Lines; no Textual here, so they are tested directly."""
