// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// How ETH is paid with a memo: a plain ETH transfer carries no event, so the payer calls
/// payWithMemo, which forwards msg.value to `to` and emits the same TransferWithMemo event as
/// MemoToken. The payment service watches this contract as the "ETH" contract
/// (CRYPTO_TOKEN_CONTRACTS=...,ETH=<router address>). The router holds no funds and no state.
contract EthMemoRouter {
    event TransferWithMemo(address indexed from, address indexed to, uint256 value, bytes32 indexed memo);

    function payWithMemo(address payable to, bytes32 memo) external payable {
        require(to != address(0), "EthMemoRouter: pay to the zero address");
        require(msg.value > 0, "EthMemoRouter: no value");
        emit TransferWithMemo(msg.sender, to, msg.value, memo);
        (bool ok, ) = to.call{value: msg.value}("");
        require(ok, "EthMemoRouter: transfer failed");
    }
}
