#ifndef EVSTORE_CNETLINK_SHIM_H
#define EVSTORE_CNETLINK_SHIM_H
// The kernel's route netlink ABI (rtnetlink(7)): nlmsghdr, sockaddr_nl, ifinfomsg,
// ifaddrmsg, rtmsg, the RTM_* message types and the RTMGRP_* multicast groups. Only
// declarations: nothing is linked.
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#endif
