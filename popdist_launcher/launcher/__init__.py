"""Everything that runs inside ``poprun-lite``: supervision, output, reports, backends."""
