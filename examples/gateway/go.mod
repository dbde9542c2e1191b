module ember/examples/gateway

go 1.23

require ember v0.0.0

replace ember => ../../bindings/go
