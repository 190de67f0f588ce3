-- This session's table for the CSV rows of an import, as text (checked before they
-- move); `line` numbers them as COPY reads them, the header being line 1.
CREATE TEMPORARY TABLE suppressions_import (
    line bigint GENERATED ALWAYS AS IDENTITY (START WITH 2),
    address text, tenant text, reason text, created text
) ON COMMIT DROP
