module ember

go 1.23
