"""The toolbox at the terminal (``shelldon tools``): list, show and restore self-coded tools,
and move the live ones between devices as one archive (``export`` / ``import``).

``archive`` writes and reads the tar.gz (treating a read archive as hostile), ``importer``
stages, gates and promotes what an archive carries, ``commands`` is the terminal front.
"""

from shelldon.toolbox.archive import (
    ArchivedTool,
    ArchiveError,
    ArchiveLimits,
    ExportReport,
    export_toolbox,
    read_archive,
)
from shelldon.toolbox.commands import (
    ToolNotFound,
    ToolRow,
    ToolsRequest,
    list_text,
    run_tools,
    show_text,
    tool_rows,
)
from shelldon.toolbox.importer import ImportResult, Outcome, import_tools

__all__ = [
    "ArchiveError",
    "ArchiveLimits",
    "ArchivedTool",
    "ExportReport",
    "ImportResult",
    "Outcome",
    "ToolNotFound",
    "ToolRow",
    "ToolsRequest",
    "export_toolbox",
    "import_tools",
    "list_text",
    "read_archive",
    "run_tools",
    "show_text",
    "tool_rows",
]
