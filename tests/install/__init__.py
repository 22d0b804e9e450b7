"""The README's first command and the installer, run literally, as a new user would."""
