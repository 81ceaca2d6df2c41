module jsongate/bench/goagg

go 1.19
