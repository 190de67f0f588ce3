-- Written before DATA: the attempts of node $1 (sql/functions/mtad_begin.sql says
-- what it checks and writes). Returns each delivery still leased to the node with
-- what became of it.
SELECT id, became FROM mtad_begin($1, $2, $3, $4, $5, $6, $7, $8, $9)
