"""shelldon: a self-coding pet agent for one owner, on a Raspberry Pi Zero 2W."""

__version__ = "0.1.0"
