"""The provider seam: holds credentials, normalizes tool calls, executes nothing."""
