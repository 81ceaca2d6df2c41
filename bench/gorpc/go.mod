module jsongate/bench/gorpc

go 1.19
