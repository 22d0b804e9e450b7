"""Transports: Telegram Bot API over aiohttp, and the console."""
