// A Go program outside ember's repository (tests/go/check_install.sh copies it into a scratch directory): it
// requires the binding by its module path from the installed module proxy, links the installed library through
// pkg-config, answers a question on the model given as its argument under greedy decoding, and prints the answer
// and the library's version, for the script to check.
package main

import (
	"context"
	"fmt"
	"os"

	ember "ember.invalid/ember/bindings/go"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: install_consumer MODEL.gguf")
		os.Exit(2)
	}
	if err := answer(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "install_consumer:", err)
		os.Exit(1)
	}
}

func answer(model string) error {
	if ember.Version() != ember.HeaderVersion() {
		return fmt.Errorf("library %s, header %s", ember.Version(), ember.HeaderVersion())
	}
	engine, err := ember.NewEngine(ember.Config{Model: model, Threads: 2})
	if err != nil {
		return err
	}
	defer engine.Close()
	body := `{"messages": [{"role": "user", "content": "What is the boiling point of water in Celsius?"}],` +
		` "max_tokens": 24, "temperature": 0}`
	request, err := engine.Submit(context.Background(), []byte(body))
	if err != nil {
		return err
	}
	defer request.Close()
	text := ""
	for event, err := range request.Events() {
		if err != nil {
			return err
		}
		text += event.Text
	}
	fmt.Printf("version %s\nanswer %s\n", ember.Version(), text)
	return nil
}
