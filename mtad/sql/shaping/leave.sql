-- A node stops: its usage rows go (the shared bucket state stays).
DELETE FROM bucket_usage WHERE node = $1
