"""What a route gets from the running app."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from sentient.agent.turn import Agent
from sentient.workspace import Workspace


def _agent(request: Request) -> Agent:
    agent: Agent = request.app.state.agent
    return agent


def _workspace(request: Request) -> Workspace:
    workspace: Workspace = request.app.state.workspace
    return workspace


AgentDep = Annotated[Agent, Depends(_agent)]
WorkspaceDep = Annotated[Workspace, Depends(_workspace)]
