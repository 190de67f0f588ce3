DELETE FROM nodes WHERE id = $1
