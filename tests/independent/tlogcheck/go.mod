module cadence.test/tlogcheck

go 1.19
