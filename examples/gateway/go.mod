module ember.invalid/ember/examples/gateway

go 1.23

require ember.invalid/ember/bindings/go v0.1.0

replace ember.invalid/ember/bindings/go => ../../bindings/go
