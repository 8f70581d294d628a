module example.com/hello

go 1.23

require github.com/google/uuid v1.6.0
