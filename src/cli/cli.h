/* The `loom` command: each subcommand is `int cmd_<name>(int argc, char **argv)` in
 * cmd_<name>.c, with argv[0] the subcommand name; returns the process exit status.
 * Every subcommand answers --help. */
#ifndef LM_CLI_H
#define LM_CLI_H

int cmd_up(int argc, char **argv);
int cmd_down(int argc, char **argv);
int cmd_controller(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_interpret(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_array(int argc, char **argv);
int cmd_token(int argc, char **argv);
int cmd_queue(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_usage(int argc, char **argv);
int cmd_proxy(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);
int cmd_drain(int argc, char **argv);

#endif
