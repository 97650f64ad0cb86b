"""Tables generated from other projects' sources (not typed by hand): each is a data file written by
its tool under tools/ and a small module that loads it. Regenerate, never edit."""
