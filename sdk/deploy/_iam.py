"""The stack's IAM roles, least privilege, as CloudFormation resources.

- task role (every task Lambda and the cleanup Lambda): its own log groups and
  the VPC network interfaces (what ``AWSLambdaVPCAccessExecutionRole`` grants,
  the logs narrowed to the functions' groups); no S3: the daemon reads and
  writes a task's COS objects;
- storage role: that, and get/put/delete under ``s3://CosBucket/CosPrefix/``
  with a listing limited to the prefix;
- server role (the host's instance profile): invoke the storage Lambdas only,
  list functions (Lambda's ``ListFunctions`` takes no resource: the daemon
  counts the deployed ``<prefix><i>``), get/put/delete/list under the prefix,
  read the tokens and TLS secrets, write its own log group (the servers' output);
- state machine role: invoke the task and cleanup Lambdas only.

Pure: dicts only. Not here: which resources exist (``_template``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ENI_ACTIONS", "S3_OBJECT_ACTIONS", "lambda_role", "server_role", "state_machine_role"]

#: What a Lambda in a VPC needs to attach to it (no resource-level permissions exist for these).
ENI_ACTIONS = ["ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
               "ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"]
S3_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]


def _role(service: str, statements: list[dict[str, Any]], description: str) -> dict[str, Any]:
    return {"Type": "AWS::IAM::Role", "Properties": {
        "Description": description,
        "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}]},
        "Policies": [{"PolicyName": "funcsion", "PolicyDocument": {"Version": "2012-10-17",
                                                                   "Statement": statements}}]}}


def _cos() -> list[dict[str, Any]]:
    """Objects under the COS prefix, and a listing of the prefix only."""
    return [
        {"Effect": "Allow", "Action": S3_OBJECT_ACTIONS,
         "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${CosBucket}/${CosPrefix}/*"}},
        {"Effect": "Allow", "Action": "s3:ListBucket",
         "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${CosBucket}"},
         "Condition": {"StringLike": {"s3:prefix": [{"Fn::Sub": "${CosPrefix}/*"}, {"Fn::Sub": "${CosPrefix}"}]}}},
    ]


def lambda_role(functions: Sequence[str], *, s3: bool) -> dict[str, Any]:
    """The role of the Lambdas with these logical ids (their log groups are ``<id>Logs``)."""
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
         "Resource": [{"Fn::GetAtt": [f"{f}Logs", "Arn"]} for f in functions]},
        {"Effect": "Allow", "Action": ENI_ACTIONS, "Resource": "*"},
    ]
    if s3:
        statements += _cos()
    what = "storage Lambdas: logs, VPC, COS prefix" if s3 else "task Lambdas: logs and VPC only (no S3)"
    return _role("lambda.amazonaws.com", statements, f"funcsion {what}")


def _invoke(functions: Sequence[str]) -> dict[str, Any]:
    arns: list[Any] = []
    for f in functions:
        arns += [{"Fn::GetAtt": [f, "Arn"]}, {"Fn::Sub": f"${{{f}.Arn}}:*"}]
    return {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": arns}


def server_role(storage_functions: Sequence[str]) -> dict[str, Any]:
    statements = [
        _invoke(storage_functions),
        {"Effect": "Allow", "Action": "lambda:ListFunctions", "Resource": "*"},
        *_cos(),
        {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue",
         "Resource": [{"Ref": "TokensSecret"}, {"Ref": "TlsSecret"}]},
        {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
         "Resource": {"Fn::GetAtt": ["ServerLogs", "Arn"]}},
    ]
    return _role("ec2.amazonaws.com", statements,
                 "funcsion server host: invoke the storage Lambdas, COS prefix, its secrets")


def state_machine_role(task_functions: Sequence[str]) -> dict[str, Any]:
    return _role("states.amazonaws.com", [_invoke(task_functions)],
                 "funcsion state machine: invoke the task and cleanup Lambdas")
