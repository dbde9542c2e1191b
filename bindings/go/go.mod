module ember.invalid/ember/bindings/go

go 1.23
