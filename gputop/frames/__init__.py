"""Everything that makes Frames: the live sampler, playback, the fleet sampler, one derivation."""
