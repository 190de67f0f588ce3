SELECT mtad_quota_take($1, $2, $3, $4)
