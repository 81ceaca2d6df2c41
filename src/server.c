/* placeholder: replaced by the module */
typedef int jg_placeholder_server;
