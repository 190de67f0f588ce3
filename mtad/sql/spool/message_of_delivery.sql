SELECT message FROM deliveries WHERE id = $1
