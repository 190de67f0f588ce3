-- This session's table for the CSV rows of an import, as text (checked before they move).
CREATE TEMPORARY TABLE suppressions_import (
    address text, tenant text, reason text, created text
) ON COMMIT DROP
