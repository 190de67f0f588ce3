-- The outcomes of attempts by node $1 at $2 (sql/functions/mtad_record.sql says
-- what it writes); `ids`: those recorded.
SELECT mtad_record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) AS ids
