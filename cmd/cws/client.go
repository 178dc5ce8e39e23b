package main

import "github.com/spf13/cobra"

// addClientCommands adds the commands that talk to a running cws (sessions, call,
// upload, download, doctor).
func addClientCommands(root *cobra.Command, getenv func(string) string) {}
